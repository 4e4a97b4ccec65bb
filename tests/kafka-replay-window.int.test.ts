/**
 * `detect --replay-max-age`: a new partition owner rebuilds state from recent committed batches
 * only, passing over older ones, then goes on live from the committed offset.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { encodeBatch } from '../stream/codec.js';
import { KafkaTransport } from '../stream/kafka.js';
import type { Delivery } from '../stream/transport.js';
import { brokers, deleteTopics, names, waitFor } from './kafka-helpers.js';

const topics: string[] = [];
afterAll(async () => {
  if (brokers().length) await deleteTopics(brokers(), topics);
});

const event = (n: number) => ({ v: 1, kind: 'job_event', ts: Date.now(), job: 'window', event: `e${n}` });

describe.skipIf(brokers().length === 0)('kafka replay window', () => {
  it('replays only committed batches younger than the window, then delivers live ones', async () => {
    const n = names('replay-window');
    topics.push(n.topic, n.deadLetterTopic);
    const cfg = { brokers: brokers(), ...n, partitions: 1 };
    const setup = new KafkaTransport(cfg);
    await setup.ensureTopics();
    await setup.stop();

    // Four batches a previous owner processed and committed: two from 3 h ago, two from a minute ago.
    const kafka = new Kafka({ brokers: brokers(), logLevel: logLevel.NOTHING });
    const producer = kafka.producer();
    await producer.connect();
    const now = Date.now();
    await producer.send({
      topic: n.topic,
      messages: [0, 1, 2, 3].map((i) => ({
        key: 'window',
        value: encodeBatch([event(i)]),
        timestamp: String(i < 2 ? now - 3 * 3_600_000 : now - 60_000),
      })),
    });
    await producer.disconnect();
    const admin = kafka.admin();
    await admin.connect();
    await admin.setOffsets({ groupId: n.group, topic: n.topic, partitions: [{ partition: 0, offset: '4' }] });
    await admin.disconnect();

    const replayed: string[] = [];
    const live: string[] = [];
    const name = (d: Delivery) => d.events.map((e) => (e as { event: string }).event);
    const t = new KafkaTransport(cfg, {
      onReplay: (d) => void replayed.push(...name(d)),
      replayMaxAgeMs: 3_600_000,
    });
    try {
      await t.consume(async (d) => {
        live.push(...name(d));
      });
      await t.publish([{ key: 'window', events: [event(4)] }]);
      await waitFor(() => live.length >= 1, 60_000);
      expect(replayed).toEqual(['e2', 'e3']);
      expect(live).toEqual(['e4']);
      expect(t.counters()).toMatchObject({ replay_skipped_batches: 2, replayed_batches: 2 });
    } finally {
      await t.stop();
    }
  }, 120_000);
});
