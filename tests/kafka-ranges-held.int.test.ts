/**
 * A store that cannot answer while the consumer reads or records its delivery ranges
 * (store/delivery-ranges.ts) is a store outage, not a consumer crash: the batch is held and
 * retried with the member kept in its group by heartbeats, the failure is told as a store failure
 * (which `detect` shows on /healthz as `store`, not `bus`), and once the store answers every
 * message is handed over once, in order, and committed.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import { KafkaTransport } from '../stream/kafka.js';
import { brokers, deleteTopics, names, waitFor } from './kafka-helpers.js';

const topics: string[] = [];
afterAll(async () => {
  if (brokers().length) await deleteTopics(brokers(), topics);
});

/** Delivery ranges kept in memory, with each call failing as a store that is down would. */
class RangesBehindAStore {
  loadDown = true;
  recordDown = true;
  loads = 0;
  records = 0;
  private readonly kept = new Map<number, number>();
  async load(_topic: string, _partition: number, from: number): Promise<Map<number, number>> {
    this.loads++;
    if (this.loadDown) throw new RankwatchError('RANKWATCH_ERR_STORE_UNAVAILABLE', 'store is unreachable');
    return new Map([...this.kept].filter(([, last]) => last >= from));
  }
  async record(_topic: string, _partition: number, first: number, last: number): Promise<void> {
    this.records++;
    if (this.recordDown) throw new RankwatchError('RANKWATCH_ERR_STORE_UNAVAILABLE', 'store is unreachable');
    this.kept.set(first, last);
  }
}

async function committedOffset(group: string, topic: string): Promise<number> {
  const admin = new Kafka({ brokers: brokers(), logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    const got = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    return Number(got[0].partitions[0].offset);
  } finally {
    await admin.disconnect();
  }
}

describe.skipIf(brokers().length === 0)(
  'kafka: the store down while delivery ranges are read or recorded',
  () => {
    it('holds the batch as a store failure, stays in the group, then hands every message over once', async () => {
      const n = names('ranges-held');
      topics.push(n.topic, n.deadLetterTopic);
      // The broker's smallest session timeout: a hold that did not heartbeat would lose the member.
      const cfg = { brokers: brokers(), ...n, partitions: 1, sessionTimeoutMs: 6_000, mergeEvents: 1 };
      const publisher = new KafkaTransport(cfg);
      for (let i = 0; i < 4; i++)
        await publisher.publish([
          {
            key: 'host:h1',
            events: [{ v: 1, kind: 'fault', ts: 1_000 + i, host: 'h1', source: 'xid', code: 79 }],
          },
        ]);
      await publisher.stop();

      const ranges = new RangesBehindAStore();
      const crashes: string[] = [];
      const told: string[] = [];
      let joins = 0;
      const consumer = new KafkaTransport(cfg, {
        boundaries: ranges,
        onCrash: (err) => crashes.push(err.message),
        onJoin: () => joins++,
        onBoundariesRetry: (err) => told.push(`failing: ${err.message}`),
        onBoundariesRecovered: () => told.push('recovered'),
        log: () => {},
      });
      const handed: number[] = [];
      await consumer.consume(async (d) => {
        for (const m of d.messages ?? []) handed.push(m.offset);
      });
      try {
        // Reading the ranges on record fails at join: held past the session timeout, nothing handed over.
        await waitFor(() => ranges.loads >= 2, 60_000, 'the ranges read again');
        await new Promise((r) => setTimeout(r, 8_000));
        expect(handed).toEqual([]);
        expect(told[0]).toBe('failing: store is unreachable');
        expect(told).not.toContain('recovered');

        // The ranges are read; recording the first delivery's range fails: still held.
        ranges.loadDown = false;
        await waitFor(() => ranges.records >= 2, 60_000, 'the range recorded again');
        expect(handed).toEqual([]);
        expect(told.filter((t) => t === 'recovered')).toHaveLength(1);

        ranges.recordDown = false;
        await waitFor(async () => (await committedOffset(n.group, n.topic)) === 4, 60_000, 'the commit');
        expect(handed).toEqual([0, 1, 2, 3]);
        expect(told.at(-1)).toBe('recovered');
        expect(crashes).toEqual([]);
        expect(joins).toBe(1);
      } finally {
        await consumer.stop();
      }
    }, 180_000);

    it('hands deliveries over in their partition order when their ranges are recorded out of order', async () => {
      const n = names('ranges-order');
      topics.push(n.topic, n.deadLetterTopic);
      const cfg = { brokers: brokers(), ...n, partitions: 1, mergeEvents: 1, pipelineDepth: 4 };
      const publisher = new KafkaTransport(cfg);
      // One key per message: none is merged with the next, so four are in flight at once.
      await publisher.publish(
        Array.from({ length: 8 }, (_, i) => ({
          key: `host:h${i}`,
          events: [{ v: 1, kind: 'fault', ts: 1_000 + i, host: `h${i}`, source: 'xid', code: 79 }],
        })),
      );
      await publisher.stop();
      // A store whose inserts finish out of order (chDB writes on its own threads): each range
      // recorded later the earlier its offset, so the fourth of a round finishes first.
      const ranges = {
        load: async () => new Map<number, number>(),
        record: (_t: string, _p: number, first: number) =>
          new Promise<void>((r) => setTimeout(r, (8 - first) * 40)),
      };
      const consumer = new KafkaTransport(cfg, { boundaries: ranges, log: () => {} });
      const handed: number[] = [];
      await consumer.consume(async (d) => {
        for (const m of d.messages ?? []) handed.push(m.offset);
      });
      try {
        await waitFor(async () => (await committedOffset(n.group, n.topic)) === 8, 60_000, 'the commit');
        expect(handed).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      } finally {
        await consumer.stop();
      }
    }, 120_000);
  },
);
