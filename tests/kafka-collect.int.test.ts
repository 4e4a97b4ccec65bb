/**
 * `rankwatch collect --bus kafka://…` on the real test broker: the node collector scrapes a local
 * dcgm-exporter and its gpu events land on the events topic, keyed by job (or host), readable by
 * any consumer. The at-scale counterpart of tests/collect.int.test.ts.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KafkaTransport } from '../stream/kafka.js';
import type { Delivery } from '../stream/transport.js';
import { type Running, serveText, startRankwatch } from './helpers.js';
import { brokers, deleteTopics, names, waitFor } from './kafka-helpers.js';

const metrics = readFileSync(
  join(import.meta.dirname, '..', 'collectors', 'parsers', 'fixtures', 'dcgm-k8s.prom'),
  'utf8',
);

describe('rankwatch collect → Kafka', () => {
  const n = names('collect');
  let exporter: Awaited<ReturnType<typeof serveText>>;
  let collector: Running;

  beforeAll(async () => {
    exporter = await serveText('/metrics', metrics);
    collector = startRankwatch([
      'collect',
      '--bus',
      `kafka://${brokers().join(',')}/${n.topic}`,
      '--host',
      'gpu-0042',
      '--dcgm',
      exporter.url,
      '--flush-ms',
      '200',
    ]);
  });

  afterAll(async () => {
    collector.kill();
    await exporter.close();
    await deleteTopics(brokers(), [n.topic, n.deadLetterTopic]);
  });

  it('publishes the node’s gpu events, keyed by job or host, for the detectors to consume; stops cleanly', async () => {
    // Read it back as rankwatch detect does: the Kafka transport's consumer side.
    const consumer = new KafkaTransport({
      brokers: brokers(),
      topic: n.topic,
      deadLetterTopic: n.deadLetterTopic,
      group: n.group,
      sessionTimeoutMs: 10_000,
    });
    const deliveries: Delivery[] = [];
    await consumer.consume(async (d) => {
      deliveries.push(d);
    });
    const gpu = () =>
      deliveries
        .flatMap((d) => d.events as { kind: string; host: string; gpu: number; job?: string }[])
        .filter((e) => e.kind === 'gpu');
    await waitFor(() => new Set(gpu().map((e) => e.gpu)).size === 2, 90_000, 'gpu events of both GPUs');
    await consumer.stop();
    expect(new Set(gpu().map((e) => e.gpu))).toEqual(new Set([0, 1]));
    // Keyed by job where the exporter's Kubernetes labels name one, else by host.
    for (const d of deliveries) {
      const jobs = new Set(d.events.map((e) => (e as { job?: string }).job));
      expect(jobs.size).toBe(1);
      const [job] = jobs;
      expect(d.key).toBe(job ?? 'host:gpu-0042');
    }
    expect(await collector.stop(), collector.stderr()).toBe(0);
  }, 120_000);
});
