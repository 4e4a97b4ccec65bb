/**
 * The broker goes away under a consumer, on a broker of its own (another port, its own data) so
 * the shared test broker stays up for the others:
 * - `rankwatch detect` started before its broker waits (health `bus` failing, logged once) and
 *   joins when the broker comes up, instead of exiting;
 * - a batch that fails half-way (a heartbeat refused while the broker restarts, so kafkajs
 *   restarts its consumer) leaves no delivery running unseen: the restarted consumer does not
 *   hand a message that was already handled to the handler a second time;
 * - after the broker restarts, the group consumes again about one session timeout later (the
 *   restarted consumer is a new member; the old one's session has to expire), so a shorter
 *   `--session-timeout-ms` shortens the pause (docs/kafka.md).
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { KafkaTransport } from '../stream/kafka.js';
import { brokers, exited, kafkaTestScope, names, ownBroker, rankwatch, waitFor } from './kafka-helpers.js';

const { dir } = kafkaTestScope('rankwatch-kafka-restart-');
const broker = await ownBroker(dir, Number(process.env.RANKWATCH_TEST_KAFKA_RESTART_PORT ?? 19392));
const address = broker.address;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(brokers().length === 0)('kafka: the broker away under a consumer', () => {
  it('detect started before its broker waits for it, failing health meanwhile, then joins', async () => {
    const n = names('restart-detect');
    const detect = rankwatch([
      'detect',
      ...['--brokers', address.join(','), '--topic', n.topic, '--dead-letter-topic', n.deadLetterTopic],
      ...['--group', n.group, '--partitions', '1', '--data', join(dir, 'data'), '--health-port', '0'],
    ]);
    try {
      let url = '';
      await waitFor(
        () => {
          url = /health on (http:\/\/\S+)\/healthz/.exec(detect.log())?.[1] ?? '';
          return url !== '';
        },
        90_000,
        'detect to serve health',
      );
      await waitFor(
        async () => (await fetch(`${url}/healthz`)).status === 503,
        30_000,
        'health to fail while the broker is down',
      );
      const down = (await (await fetch(`${url}/healthz`)).json()) as { checks: { bus: { ok: boolean } } };
      expect(down.checks.bus.ok).toBe(false);
      await sleep(3_000);
      expect(detect.exitCode, detect.log()).toBeNull();
      await broker.start();
      await waitFor(() => /joined group/.test(detect.log()), 120_000, 'detect to join once the broker is up');
      // Ok again on the join, or at the latest 90 s after the last kafkajs line about the outage.
      await waitFor(
        async () => (await fetch(`${url}/healthz`)).status === 200,
        100_000,
        'health ok again',
      ).catch(async (err) => {
        throw new Error(`${err.message}: ${await (await fetch(`${url}/healthz`)).text()}\n${detect.log()}`);
      });
      // One line when the bus failure starts, not one per attempt.
      expect(detect.log().match(/bus failing/g)?.length, detect.log()).toBe(1);
    } finally {
      detect.kill('SIGTERM');
    }
    expect(await exited(detect, 60_000), detect.log()).toBe(0);
  }, 300_000);

  it('a consumer restarted by kafkajs mid-batch does not hand a handled message over again', async () => {
    await broker.start(); // no-op when the first test left it running
    const n = names('restart-batch');
    const cfg = { brokers: address, ...n, partitions: 1, sessionTimeoutMs: 6_000, heartbeatIntervalMs: 500 };
    const producer = new KafkaTransport(cfg);
    // One message per key: each is a delivery of its own, so several are in flight at once.
    await producer.publish(
      Array.from({ length: 8 }, (_, i) => ({
        key: `job-${i}`,
        events: [{ v: 1, kind: 'fault', ts: Date.now(), host: `h${i}`, source: 'xid', code: 79 }],
      })),
    );
    await producer.stop();

    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const seen: number[] = [];
    const consumer = new KafkaTransport({ ...cfg, pipelineDepth: 3 });
    try {
      await consumer.consume(async (d) => {
        const offsets = (d.messages ?? []).map((m) => m.offset);
        if (offsets.includes(0) && !seen.includes(0)) {
          seen.push(...offsets);
          await gate; // held while the broker restarts; the next two deliveries finish meanwhile
          return;
        }
        seen.push(...offsets);
      });
      await waitFor(
        () => seen.includes(0) && seen.includes(1) && seen.includes(2),
        60_000,
        'three deliveries',
      );
      await broker.stop();
      await sleep(cfg.sessionTimeoutMs + 2_000);
      await broker.start();
      // The batch goes on: its next heartbeat is refused (the broker forgot the member), and it fails.
      release();
      await waitFor(
        () => [...Array(8).keys()].every((o) => seen.includes(o)),
        180_000,
        'every message handled',
      );
      await sleep(3_000);
      const twice = seen.filter((o, i) => seen.indexOf(o) !== i);
      expect(twice, `handled: ${seen.join(',')}`).toEqual([]);
    } finally {
      release();
      await consumer.stop();
    }
  }, 420_000);

  it('after a broker restart, consumes again about one session timeout later', async () => {
    await broker.start();
    const n = names('restart-rejoin');
    // Against the 30 s default, which pauses ~34 s here: the bound below fails if it were used.
    const cfg = {
      brokers: address,
      ...n,
      partitions: 1,
      sessionTimeoutMs: 8_000,
      heartbeatIntervalMs: 1_000,
    };
    const producer = new KafkaTransport(cfg);
    const seen: string[] = [];
    const consumer = new KafkaTransport(cfg);
    const fault = (host: string) => ({ v: 1, kind: 'fault', ts: Date.now(), host, source: 'xid', code: 79 });
    try {
      await consumer.consume(async (d) => {
        for (const e of d.events) seen.push((e as { host: string }).host);
      });
      await producer.publish([{ key: 'job', events: [fault('before')] }]);
      await waitFor(() => seen.includes('before'), 60_000, 'the first message');
      await broker.stop();
      await sleep(3_000);
      await broker.start();
      const back = Date.now();
      await producer.publish([{ key: 'job', events: [fault('after')] }]);
      await waitFor(() => seen.includes('after'), 120_000, 'the message sent after the restart');
      const pause = Date.now() - back;
      expect(pause, `consumed again ${pause} ms after the broker was back`).toBeLessThan(25_000);
    } finally {
      await producer.stop();
      await consumer.stop();
    }
  }, 300_000);
});
