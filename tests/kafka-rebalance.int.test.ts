/**
 * A partition a rebalance takes away: the process that owned it is told (onRevoked), so `detect`
 * lets its jobs go instead of keeping state that goes stale (and that other traffic would end
 * with "went quiet" findings while the job runs on elsewhere). When the partition comes back, it
 * is read from the start, so its replay rebuilds the whole state, not only what came since.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { KafkaTransport } from '../stream/kafka.js';
import { brokers, deleteTopics, names, partitionOfKey, waitFor } from './kafka-helpers.js';

const n = names('rebalance');
afterAll(async () => {
  if (brokers().length) await deleteTopics(brokers(), [n.topic, n.deadLetterTopic]);
});

describe.skipIf(brokers().length === 0)('kafka: a partition moved to another member', () => {
  it('is told to its old owner, and read from the start when it comes back', async () => {
    const cfg = {
      brokers: brokers(),
      ...n,
      partitions: 2,
      sessionTimeoutMs: 10_000,
      heartbeatIntervalMs: 1_000,
    };
    // One key per partition.
    const keys = ['job-0', 'job-1', 'job-2', 'job-3', 'job-4', 'job-5'];
    const keyOf = (p: number) => keys.find((k) => partitionOfKey(k, 2) === p)!;
    const ev = (job: string, i: number) => ({
      v: 1,
      kind: 'fault',
      ts: Date.now(),
      host: `h${i}`,
      job,
      source: 'xid',
      code: 79,
    });
    const producer = new KafkaTransport(cfg);
    const handledA: string[] = [];
    const replayedA: string[] = [];
    const revokedA: number[][] = [];
    const a = new KafkaTransport(cfg, {
      onReplay: (d) => void replayedA.push(`${d.partition}/${d.offset}`),
      onRevoked: (parts) => void revokedA.push(parts),
    });
    const b = new KafkaTransport(cfg, { onReplay: () => {} });
    try {
      await a.consume(async (d) => void handledA.push(`${d.partition}/${d.offset}`));
      await producer.publish([0, 1].map((p) => ({ key: keyOf(p), events: [ev(keyOf(p), p)] })));
      await waitFor(() => handledA.length === 2, 60_000, 'A to handle one message per partition');
      expect(revokedA).toEqual([]);

      const handledB: string[] = [];
      await b.consume(async (d) => void handledB.push(`${d.partition}/${d.offset}`));
      await waitFor(() => revokedA.length > 0, 90_000, 'the rebalance to take a partition from A');
      expect(revokedA[0]).toHaveLength(1);
      const moved = revokedA[0][0];
      // Handled by B, the new owner, and committed.
      await producer.publish([{ key: keyOf(moved), events: [ev(keyOf(moved), 9)] }]);
      await waitFor(() => handledB.includes(`${moved}/1`), 60_000, 'B to handle the moved partition');

      // B leaves: A gets the partition back and replays it from offset 0, not from where it stopped.
      await b.stop();
      await waitFor(() => replayedA.includes(`${moved}/1`), 90_000, 'A to replay the returned partition');
      expect(replayedA.filter((r) => r.startsWith(`${moved}/`))).toEqual([`${moved}/0`, `${moved}/1`]);
    } finally {
      await producer.stop();
      await a.stop();
      await b.stop();
    }
  }, 300_000);
});
