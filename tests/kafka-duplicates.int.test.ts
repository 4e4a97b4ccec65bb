/**
 * A producer is at least once: after a lost acknowledgement (a broker stop mid-request, seen in the
 * soak) the collector sends a batch again and the broker keeps both copies at two offsets. The raw
 * tables keep one row per event whatever happens, but the per-minute rollups count every inserted
 * block: the consumer must pass over a message whose bytes repeat a recent one.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { buildPipeline } from '../pipeline/build.js';
import { ClusterSim } from '../sim/cluster.js';
import { ChdbStore } from '../store/chdb.js';
import { KafkaTransport } from '../stream/kafka.js';
import { brokers, caughtUp, kafkaTestScope, names, waitFor } from './kafka-helpers.js';

const { dir, topics } = kafkaTestScope('rankwatch-kafka-dup-');
const chdb = new ChdbStore({ path: dir });
const n = names('duplicates');
topics.push(n.topic, n.deadLetterTopic);
afterAll(() => chdb.close());

describe.skipIf(brokers().length === 0)('kafka: the same batch sent twice by its producer', () => {
  it('is stored once, in raw tables and in every rollup, and counted as a duplicate', async () => {
    await chdb.migrate();
    const cfg = { brokers: brokers(), ...n, partitions: 1 };
    const sim = new ClusterSim({
      ranks: 16,
      steps: 20,
      seed: 3,
      startTs: Date.now() - 600_000,
      collectives: false,
    });
    const events = [...sim.events()].filter((e) => (e as { job?: string }).job === sim.opts.job);
    const half = Math.ceil(events.length / 2);
    const producer = new KafkaTransport(cfg);
    const first = { key: sim.opts.job, events: events.slice(0, half) };
    // Offsets 0, 1, 2: the first half, its resend (same bytes), the second half.
    await producer.publish([first]);
    await producer.publish([first]);
    await producer.publish([{ key: sim.opts.job, events: events.slice(half) }]);
    await producer.stop();

    const consumer = new KafkaTransport(cfg);
    const pipeline = buildPipeline({ transport: consumer, store: chdb });
    await pipeline.start();
    await waitFor(() => caughtUp(brokers(), n.group, n.topic), 60_000, 'the group to commit everything');
    await pipeline.stop();

    const steps = events.filter((e) => e.kind === 'step').length;
    const count = async (sql: string) => Number((await chdb.query<{ n: string }>(sql))[0].n);
    expect(consumer.counters().duplicate_messages).toBe(1);
    expect(await count('SELECT count() AS n FROM steps FINAL')).toBe(steps);
    expect(
      await count(
        'SELECT sum(c) AS n FROM (SELECT countMerge(steps) AS c FROM rank_minute GROUP BY job, minute, rank)',
      ),
    ).toBe(steps);
    expect(
      await count(
        'SELECT sum(c) AS n FROM (SELECT countMerge(rows) AS c FROM job_minute GROUP BY job, minute)',
      ),
    ).toBe(steps);
  }, 180_000);
});
