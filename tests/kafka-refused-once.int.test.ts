/**
 * An event too large for the bus, published with others: the collector isolates it (halving the
 * batches until it stands alone, stream/isolate.ts) and publishes the rest. What went out with it
 * must not go out again: each published copy is a message of its own (new offsets, new insert
 * token), which the per-minute rollups count twice. Seen in the soak (`npm run soak`): the same
 * record batch five times in the topic, under five producer ids, and +4833 rollup rows.
 */
import { randomBytes } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, describe, expect, it } from 'vitest';
import { publishIsolating } from '../stream/isolate.js';
import { KafkaTransport } from '../stream/kafka.js';
import { brokers, deleteTopics, names } from './kafka-helpers.js';

const n = names('refused-once');
afterAll(async () => {
  if (brokers().length) await deleteTopics(brokers(), [n.topic, n.deadLetterTopic]);
});

describe.skipIf(brokers().length === 0)('kafka: an oversized event among others', () => {
  it('is refused alone; every other message is in the topic once', async () => {
    const producer = new KafkaTransport({ brokers: brokers(), ...n, partitions: 1 });
    const ev = (i: number, extra = {}) => ({ v: 1, kind: 'fault', ts: Date.now(), host: `h${i}`, ...extra });
    // Random bytes do not compress: 2 MB stays over the 900 KiB message limit after gzip.
    const big = ev(99, { message: randomBytes(1_500_000).toString('base64') });
    const refused: unknown[] = [];
    try {
      await publishIsolating(
        producer,
        [
          { key: 'job-a', events: [ev(1), ev(2), ev(3)] },
          { key: 'job-b', events: [ev(4), big, ev(5)] },
          { key: 'job-c', events: [ev(6)] },
        ],
        (e) => refused.push(e),
      );
    } finally {
      await producer.stop();
    }
    expect(refused).toEqual([big]);
    const admin = new Kafka({ brokers: brokers(), logLevel: logLevel.NOTHING }).admin();
    await admin.connect();
    const ends = await admin.fetchTopicOffsets(n.topic);
    await admin.disconnect();
    const messages = ends.reduce((s, e) => s + Number(e.high), 0);
    // job-a and job-c as one message each; job-b halved around the big event: [4], [5].
    expect(messages).toBe(4);
  }, 120_000);
});
