/**
 * Shutdown of a Kafka detector while its store is down: the batch in hand is given up after the
 * grace period instead of holding SIGTERM forever, stays uncommitted, and the next group member
 * stores it, so nothing is lost or doubled.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { buildPipeline } from '../pipeline/build.js';
import { ClusterSim } from '../sim/cluster.js';
import { ChdbStore } from '../store/chdb.js';
import { tableCounts } from '../store/queries.js';
import { KafkaTransport } from '../stream/kafka.js';
import { batchByKey } from '../stream/transport.js';
import { SwitchableStore } from './helpers.js';
import { brokers, kafkaTestScope, names, waitFor } from './kafka-helpers.js';

const { dir, topics } = kafkaTestScope('rankwatch-kafka-store-down-');
const chdb = new ChdbStore({ path: dir });
afterAll(() => chdb.close());

async function committed(group: string, topic: string): Promise<number> {
  const admin = new Kafka({ brokers: brokers(), logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    const got = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    return got[0].partitions.reduce((sum, p) => sum + Math.max(0, Number(p.offset)), 0);
  } finally {
    await admin.disconnect();
  }
}

describe.skipIf(brokers().length === 0)('kafka detector shutdown with the store down', () => {
  it('gives up the batch in hand after the grace period, uncommitted; the next member stores it once', async () => {
    const n = names('store-down');
    topics.push(n.topic, n.deadLetterTopic);
    const cfg = { brokers: brokers(), ...n, partitions: 1, sessionTimeoutMs: 10_000 };
    const events = [
      ...new ClusterSim({ ranks: 16, steps: 20, seed: 5, startTs: Date.now() - 600_000 }).events(),
    ];
    const publisher = new KafkaTransport(cfg);
    await publisher.publish(batchByKey(events));
    await publisher.stop();

    const down = new SwitchableStore(chdb);
    down.down = true;
    const first = buildPipeline({ transport: new KafkaTransport(cfg), store: down, stopGraceMs: 1_000 });
    await first.start();
    await waitFor(() => down.failures >= 2, 60_000);
    const t = Date.now();
    await first.close();
    expect(Date.now() - t).toBeLessThan(20_000); // grace + one backoff, not "until the store is back"
    expect(await committed(n.group, n.topic)).toBe(0);
    expect((await tableCounts(chdb)).events).toBe(0);

    const second = buildPipeline({ transport: new KafkaTransport(cfg), store: chdb });
    await second.start();
    await waitFor(async () => (await tableCounts(chdb)).events >= events.length, 60_000);
    await second.stop();
    const counts = await tableCounts(chdb);
    expect(counts.events).toBe(events.length);
    expect(counts.steps).toBe(16 * 20);
  }, 180_000);
});
