/**
 * `rankwatch detect --repair-loop` on the real broker: two detects of one group share a topic of
 * two partitions and one ClickHouse server (tests/fixtures/chdb-http-server.ts, or a real one).
 * Faults keyed to both partitions are found by whichever detect owns them; exactly one detect, the
 * lease holder, decides on all of them (dry-run), reading them back from the store; the other
 * decides nothing. Stopped, the leader hands the lease over and the other decides from then on.
 * This file opens no ChdbStore.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KafkaTransport } from '../stream/kafka.js';
import { clickHouseForTest, type RealClickHouse } from './fixtures/clickhouse-server.js';
import { xidFault } from './helpers.js';
import {
  brokers,
  exited,
  kafkaTestScope,
  names,
  partitionOfKey,
  rankwatch,
  waitFor,
} from './kafka-helpers.js';

const { dir, topics } = kafkaTestScope('rankwatch-kafka-repair-');
const n = names('repair');
topics.push(n.topic, n.deadLetterTopic);
const database = `rankwatch_repair_${process.pid}`;
let ch: Omit<RealClickHouse, 'source'>;

beforeAll(async () => {
  ch = await clickHouseForTest(join(dir, 'ch'));
}, 120_000);

afterAll(async () => {
  await ch?.stop();
});

/** Host names whose keys land on partitions 0 and 1 of two. */
function hostsOnBothPartitions(): [string, string, string] {
  const on = (p: number, skip: string[] = []) => {
    for (let i = 1; i < 200; i++) {
      const h = `gpu-${String(i).padStart(4, '0')}`;
      if (!skip.includes(h) && partitionOfKey(`host:${h}`, 2) === p) return h;
    }
    throw new Error(`no host on partition ${p}`);
  };
  const a = on(0);
  const b = on(1);
  return [a, b, on(0, [a])];
}

describe('rankwatch detect --repair-loop', () => {
  it('one detect of two decides on every detect’s findings; the other takes over when it stops', async () => {
    const detect = () =>
      rankwatch(
        [
          'detect',
          ...['--brokers', brokers().join(','), '--topic', n.topic, '--dead-letter-topic', n.deadLetterTopic],
          ...['--group', n.group, '--partitions', '2', '--stats-interval', '0'],
          ...['--clickhouse-url', ch.url, '--clickhouse-database', database, '--repair-loop'],
        ],
        { CLICKHOUSE_URL: '', CLICKHOUSE_USER: ch.user ?? '', CLICKHOUSE_PASSWORD: ch.password ?? '' },
      );
    const one = detect();
    await waitFor(() => /joined group/.test(one.log()), 90_000, 'the first detect to join');
    const two = detect();
    const procs = [one, two];
    try {
      await waitFor(() => /joined group/.test(two.log()), 90_000, 'the second detect to join');
      expect(one.log()).toMatch(/repair loop: dry-run .* · leader \(lease epoch \d+\)/);
      expect(two.log()).toMatch(/repair loop: dry-run .* · standby/);
      const [h0, h1, h2] = hostsOnBothPartitions();
      const producer = new KafkaTransport({
        brokers: brokers(),
        topic: n.topic,
        deadLetterTopic: n.deadLetterTopic,
      });
      await producer.publish([
        { key: `host:${h0}`, events: [xidFault(h0)] },
        { key: `host:${h1}`, events: [xidFault(h1)] },
      ]);
      const decided = (p: (typeof procs)[number], h: string) =>
        new RegExp(`action cordon ${h} `).test(p.log());
      await waitFor(() => decided(one, h0) && decided(one, h1), 90_000, 'the leader to decide on both');
      expect(one.log()).toMatch(new RegExp(`action cordon (${h0}|${h1}) dry_run: dry-run`));
      expect(two.log()).not.toMatch(/action cordon/);

      one.kill('SIGTERM');
      expect(await exited(one, 60_000)).toBe(0);
      await waitFor(
        () => /repair loop: leading \(lease epoch \d+\); state restored/.test(two.log()),
        60_000,
        'the handover',
      );
      await producer.publish([{ key: `host:${h2}`, events: [xidFault(h2)] }]);
      await producer.stop();
      await waitFor(() => decided(two, h2), 90_000, 'the new leader to decide');
      // What the first leader decided was not decided again.
      expect(decided(two, h0) || decided(two, h1)).toBe(false);
    } finally {
      for (const p of procs) if (p.exitCode === null) p.kill('SIGTERM');
      await Promise.all(procs.map((p) => exited(p, 60_000).catch(() => p.kill('SIGKILL'))));
    }
  }, 400_000);
});
