/**
 * End to end on a real broker: simulated jobs published by the collector-side producer (spooling
 * publisher over Kafka), consumed by two `rankwatch detect` processes in one group, each with its
 * own chDB folder (chDB opens one folder per process). What the two stores hold together is
 * compared with `rankwatch replay` of the same events: every finding once, every event once.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { RankwatchEvent } from '../schema/events.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { KafkaTransport } from '../stream/kafka.js';
import { DiskSpool } from '../stream/spool.js';
import { SpoolingPublisher } from '../stream/spool-publisher.js';
import { batchByKey } from '../stream/transport.js';
import { expectBuiltPipeline } from './helpers.js';
import {
  brokers,
  caughtUp,
  dumpStore,
  exited,
  groupMembers,
  kafkaTestScope,
  names,
  partitionOfKey,
  rankwatch,
  readTopic,
  type StoreDump,
  waitFor,
} from './kafka-helpers.js';

const { dir, topics, children } = kafkaTestScope('rankwatch-kafka-e2e-');

const PARTITIONS = 2;
/** A job id that the default partitioner puts on `partition`. */
const jobOn = (prefix: string, partition: number) => {
  for (let i = 0; ; i++)
    if (partitionOfKey(`${prefix}-${i}`, PARTITIONS) === partition) return `${prefix}-${i}`;
};

function simulate(
  job: string,
  ranks: number,
  steps: number,
  seed: number,
  faults: string[],
): RankwatchEvent[] {
  // Event time near now: raw events older than the store's TTL (30 days) are dropped on insert.
  const startTs = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000;
  return [...new ClusterSim({ job, ranks, steps, seed, startTs, faults: faults.map(parseFault) }).events()];
}

/** `rankwatch replay` of the same events: the findings the stream must reproduce. */
async function replayFindings(events: RankwatchEvent[], name: string): Promise<string[]> {
  const file = join(dir, `${name}.jsonl`);
  const out = join(dir, `${name}.findings.jsonl`);
  writeFileSync(file, `${events.map((e) => JSON.stringify(e)).join('\n')}\n`);
  const r = rankwatch(['replay', file, '--findings', out, '--quiet']);
  expect(await exited(r, 120_000)).toBe(0);
  const { readFileSync } = await import('node:fs');
  return readFileSync(out, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const f = JSON.parse(l) as { id: string; state: string; ts: number };
      return `${f.id}|${f.state}|${Math.round(f.ts)}`;
    })
    .sort();
}

/** The collector side: 4096-event batches keyed by job, through the disk-spooling publisher. */
async function collector(t: KafkaTransport, name: string) {
  const spool = new DiskSpool({ dir: join(dir, `${name}-spool`), maxBytes: 256 << 20 });
  const p = new SpoolingPublisher(t, spool);
  return {
    publisher: p,
    async publish(events: RankwatchEvent[]) {
      for (let i = 0; i < events.length; i += 4096) await p.publish(batchByKey(events.slice(i, i + 4096)));
    },
  };
}

function detectArgs(n: ReturnType<typeof names>, id: string) {
  return [
    'detect',
    '--brokers',
    brokers().join(','),
    '--topic',
    n.topic,
    '--dead-letter-topic',
    n.deadLetterTopic,
    '--group',
    n.group,
    '--client-id',
    id,
    '--partitions',
    String(PARTITIONS),
    '--session-timeout-ms',
    // Short, so that the survivor takes over soon after a kill; long enough for an instance whose
    // two cores also run the broker, the tests and a CPU hog to keep its session.
    '10000',
    '--data',
    join(dir, `${n.group}-${id}`),
    '--stats-interval',
    '0',
  ];
}

/** The counters a detect instance logs when it stops (`… INFO rankwatch detect: counters counters={…}`). */
const lastStats = (log: string) =>
  JSON.parse(
    log
      .trim()
      .split('\n')
      .filter((l) => l.includes(' INFO rankwatch detect: counters counters={'))
      .at(-1)!
      .split(' counters=')[1],
  ) as Record<string, number>;

const findingKeys = (dumps: StoreDump[]) =>
  dumps.flatMap((d) => d.findings.map((f) => `${f.id}|${f.state}|${f.ts}`)).sort();
const eventKey = (e: RankwatchEvent) => {
  const a = e as { job?: string; host?: string };
  return `${e.kind}|${a.job ?? ''}|${a.host ?? ''}|${Math.round(e.ts)}`;
};

describe.skipIf(brokers().length === 0)('collectors -> Kafka -> two detect instances -> chDB', () => {
  it('finds what replay finds, each finding and event exactly once; malformed events go to the dead-letter topic', async () => {
    const n = names('e2e');
    topics.push(n.topic, n.deadLetterTopic);
    const faulty = simulate(jobOn('e2e-a', 0), 256, 100, 7, ['throttle:rank=37,at=30']);
    const clean = simulate(jobOn('e2e-b', 1), 64, 100, 8, []);
    const expected = await replayFindings([...faulty, ...clean], 'e2e');
    expect(expected.some((k) => k.startsWith('throttle-'))).toBe(true);
    expect(expected.some((k) => k.startsWith('straggler-'))).toBe(true);

    const d1 = rankwatch(detectArgs(n, 'd1'));
    const d2 = rankwatch(detectArgs(n, 'd2'));
    children.push(d1, d2);
    await waitFor(async () => (await groupMembers(brokers(), n.group)).length === 2, 90_000, 'two members');

    const t = new KafkaTransport({ brokers: brokers(), ...n, partitions: PARTITIONS });
    const c = await collector(t, 'e2e');
    // Mid-stream, malformed input: two invalid events inside a batch, and a message that is not
    // JSON at all. Each is set aside with its reason; the job's stream goes on around them.
    const jobA = (faulty[0] as { job: string }).job;
    const bad = [
      { v: 1, kind: 'step', ts: 1, job: jobA },
      { v: 1, kind: 'warp_drive', ts: 2, job: jobA },
    ];
    const half = Math.floor(faulty.length / 2);
    await Promise.all([c.publish(faulty.slice(0, half)), c.publish(clean)]);
    await c.publisher.publish([{ key: jobA, events: bad }]);
    await c.publisher.flushed();
    const { Kafka, logLevel } = await import('kafkajs');
    const raw = new Kafka({ brokers: brokers(), logLevel: logLevel.NOTHING }).producer();
    await raw.connect();
    await raw.send({ topic: n.topic, messages: [{ key: jobA, value: 'this is not an event' }] });
    await raw.disconnect();
    await c.publish(faulty.slice(half));
    await c.publisher.flushed();
    await c.publisher.stop();

    await waitFor(() => caughtUp(brokers(), n.group, n.topic), 180_000, 'the group to commit every batch');
    // Both instances hold a partition at the end. On a starved machine one may miss its session
    // and rejoin: the group is balanced again once it has.
    await waitFor(
      async () => (await groupMembers(brokers(), n.group)).map((m) => m.partitions.length).join() === '1,1',
      90_000,
      'one partition per instance',
    );
    d1.kill('SIGTERM');
    d2.kill('SIGTERM');
    expect(await exited(d1)).toBe(0);
    expect(await exited(d2)).toBe(0);
    expectBuiltPipeline(d1.log(), 'kafka', /^chDB at .* · dead letters: kafka dead-letter topic$/);

    const dumps = [await dumpStore(join(dir, `${n.group}-d1`)), await dumpStore(join(dir, `${n.group}-d2`))];
    // Each instance did one job's share.
    expect(dumps.every((d) => d.events.length > 0)).toBe(true);
    expect(findingKeys(dumps)).toEqual(expected);
    const stored = dumps.flatMap((d) => d.events);
    expect(stored.length).toBe(faulty.length + clean.length);
    expect(new Set(stored).size).toBe(stored.length);
    expect(new Set(stored.map((k) => k.split('|').slice(0, 4).join('|')))).toEqual(
      new Set([...faulty, ...clean].map(eventKey)),
    );

    const dl = dumps.flatMap((d) => d.deadLetters);
    expect(dl).toHaveLength(3);
    expect(dl.some((r) => /not valid JSON/.test(r))).toBe(true);
    const topic = await readTopic(brokers(), n.deadLetterTopic, (k) => k >= 3);
    expect(topic.map((m) => m.headers.reason).sort()).toEqual(dl.sort());
    expect(topic.every((m) => m.headers.reason.length > 0)).toBe(true);
  }, 300_000); // its waits allow minutes on a loaded machine; vitest's 60 s default is for unit tests

  it('a detect instance killed mid-stream (SIGKILL): the other takes over, nothing doubled, nothing lost', async () => {
    const n = names('kill');
    topics.push(n.topic, n.deadLetterTopic);
    const job = jobOn('kill-a', 0);
    const events = simulate(job, 256, 100, 11, ['throttle:rank=37,at=30']);
    const expected = await replayFindings(events, 'kill');

    const d1 = rankwatch(detectArgs(n, 'd1'));
    const d2 = rankwatch(detectArgs(n, 'd2'));
    children.push(d1, d2);
    await waitFor(async () => (await groupMembers(brokers(), n.group)).length === 2, 90_000, 'two members');
    const owner = (await groupMembers(brokers(), n.group)).find((m) => m.partitions.includes(0))!.clientId;
    const [victim, survivor] = owner === 'd1' ? [d1, d2] : [d2, d1];

    const t = new KafkaTransport({ brokers: brokers(), ...n, partitions: PARTITIONS });
    const c = await collector(t, 'kill');
    // Past the onset (step 30) before the kill, so the victim has opened findings of its own.
    const half = Math.floor(events.length * 0.55);
    await c.publish(events.slice(0, half));
    await c.publisher.flushed();
    await waitFor(() => caughtUp(brokers(), n.group, n.topic), 120_000, 'the first half to be committed');
    // Kill it while the rest streams in, so it dies with stored but uncommitted batches.
    const rest = c.publish(events.slice(half));
    await new Promise((r) => setTimeout(r, 300));
    victim.kill('SIGKILL');
    await exited(victim);
    await rest;
    await c.publisher.flushed();
    await c.publisher.stop();

    await waitFor(() => caughtUp(brokers(), n.group, n.topic), 180_000, 'the survivor to commit every batch');
    survivor.kill('SIGTERM');
    expect(await exited(survivor)).toBe(0);

    const ids = owner === 'd1' ? ['d1', 'd2'] : ['d2', 'd1'];
    const [killed, alive] = [
      await dumpStore(join(dir, `${n.group}-${ids[0]}`)),
      await dumpStore(join(dir, `${n.group}-${ids[1]}`)),
    ];
    expect(killed.events.length).toBeGreaterThan(0);
    expect(alive.events.length).toBeGreaterThan(0);
    // What both stores hold together, as one ReplacingMergeTree would: every finding and event of
    // the replay, once. A finding the survivor re-opened would have another ts: an extra key.
    expect([...new Set(findingKeys([killed, alive]))].sort()).toEqual(expected);
    // The victim had opened findings; the survivor rebuilt its state by replay and carried them on.
    expect(killed.findings.some((f) => f.state === 'open')).toBe(true);
    expect(alive.findings.length).toBeGreaterThan(0);
    expect(lastStats(survivor.log()).replayed_batches).toBeGreaterThan(0);
    const union = new Set([...killed.events, ...alive.events]);
    expect(union.size).toBe(events.length);
    expect(new Set([...union].map((k) => k.split('|').slice(0, 4).join('|')))).toEqual(
      new Set(events.map(eventKey)),
    );
  }, 300_000);
});
