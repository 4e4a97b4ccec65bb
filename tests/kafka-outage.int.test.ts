/**
 * The broker goes away for 30 s while a collector publishes: batches are spooled to disk, then
 * delivered in order when it is back, and the store ends with exactly the events produced. Runs
 * its own broker (another port, its own data) so the shared test broker stays up for the others.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildPipeline } from '../pipeline/build.js';
import type { RankwatchEvent } from '../schema/events.js';
import { ClusterSim } from '../sim/cluster.js';
import { ChdbStore } from '../store/chdb.js';
import { KafkaTransport } from '../stream/kafka.js';
import { DiskSpool } from '../stream/spool.js';
import { SpoolingPublisher } from '../stream/spool-publisher.js';
import { batchByKey } from '../stream/transport.js';
import { brokers, kafkaTestScope, names, ownBroker, waitFor } from './kafka-helpers.js';

const { dir } = kafkaTestScope('rankwatch-kafka-outage-');
const broker = await ownBroker(dir, Number(process.env.RANKWATCH_TEST_KAFKA_OUTAGE_PORT ?? 19192));
const OUTAGE_MS = 30_000;

describe.skipIf(brokers().length === 0)('a 30 s broker outage under a publishing collector', () => {
  it('spools while the broker is down, delivers when it is back: stored == produced', async () => {
    await broker.start();
    const address = broker.address;
    const n = names('outage');
    const startTs = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000;
    const events: RankwatchEvent[] = [
      ...new ClusterSim({ job: 'outage-job', ranks: 64, steps: 160, seed: 3, startTs }).events(),
    ];

    const store = new ChdbStore({ path: join(dir, 'store') });
    const consumer = new KafkaTransport({ brokers: address, ...n, partitions: 2, sessionTimeoutMs: 10_000 });
    const pipeline = buildPipeline({ transport: consumer, store });
    await pipeline.start();

    const spool = new DiskSpool({ dir: join(dir, 'spool'), maxBytes: 512 << 20 });
    const producer = new KafkaTransport({ brokers: address, ...n, partitions: 2, sendTimeoutMs: 5_000 });
    const collector = new SpoolingPublisher(producer, spool, { maxBackoffMs: 1_000 });
    let sent = 0;
    const publish = async (count: number) => {
      const slice = events.slice(sent, sent + count);
      sent += slice.length;
      if (slice.length) await collector.publish(batchByKey(slice));
    };

    await publish(10_000);
    await collector.flushed();
    await broker.stop();
    const down = Date.now();
    // A collector does not stop when the bus does: keep publishing through the outage.
    while (Date.now() - down < OUTAGE_MS) {
      await publish(500);
      await new Promise((r) => setTimeout(r, 250));
    }
    const spooled = collector.counters().spooled_batches;
    expect(spooled).toBeGreaterThan(0);
    expect(collector.spooledBytes()).toBeGreaterThan(0);
    await broker.start();
    while (sent < events.length) await publish(2_000);
    await collector.flushed();
    expect(collector.spooledBytes()).toBe(0);
    await collector.stop();

    const count = async () =>
      Number((await store.query<{ n: string }>('SELECT count() AS n FROM events FINAL'))[0].n);
    await waitFor(async () => (await count()) >= events.length, 180_000, 'every produced event in the store');
    // Settle: nothing more arrives, and nothing is doubled.
    await new Promise((r) => setTimeout(r, 1_000));
    expect(await count()).toBe(events.length);
    expect(pipeline.counters().events).toBeGreaterThanOrEqual(events.length);
    await consumer.stop();
    await store.close();
  }, 300_000);
});
