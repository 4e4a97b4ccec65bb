/**
 * `rankwatch detect` on the real broker shows its health and figures: --health-port serves
 * GET /healthz (ok, with its checks) and GET /metrics (Prometheus text with the pipeline's and the
 * dead-letter figures), every log line has a timestamp, and a clean stop exits 0.
 */
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { KafkaTransport } from '../stream/kafka.js';
import { brokers, exited, kafkaTestScope, names, rankwatch, waitFor } from './kafka-helpers.js';

const { dir, topics } = kafkaTestScope('rankwatch-detect-health-');
const n = names('health');
topics.push(n.topic, n.deadLetterTopic);

describe('rankwatch detect --health-port', () => {
  it('serves /healthz and /metrics with the pipeline and dead-letter figures; logs carry timestamps', async () => {
    const detect = rankwatch([
      'detect',
      ...['--brokers', brokers().join(','), '--topic', n.topic, '--dead-letter-topic', n.deadLetterTopic],
      ...['--group', n.group, '--partitions', '1', '--data', join(dir, 'data'), '--health-port', '0'],
    ]);
    try {
      let url = '';
      await waitFor(
        () => {
          url = /health on (http:\/\/\S+)\/healthz/.exec(detect.log())?.[1] ?? '';
          return url !== '' && /joined group/.test(detect.log());
        },
        90_000,
        'detect to join and serve health',
      );
      const producer = new KafkaTransport({
        brokers: brokers(),
        topic: n.topic,
        deadLetterTopic: n.deadLetterTopic,
      });
      const ok = {
        v: 1,
        kind: 'fault',
        ts: Date.now(),
        host: 'h1',
        source: 'xid',
        code: 79,
        message: 'GPU has fallen off the bus',
      };
      await producer.publish([{ key: 'host:h1', events: [ok, { v: 1, kind: 'fault', ts: Date.now() }] }]);
      await producer.stop();
      const metric = async (name: string) => {
        const text = await (await fetch(`${url}/metrics`)).text();
        return Number(new RegExp(`^${name} (\\d+)`, 'm').exec(text)?.[1] ?? Number.NaN);
      };
      await waitFor(
        async () => (await metric('rankwatch_detect_events_total')) === 1,
        60_000,
        'the event counted',
      );
      expect(await metric('rankwatch_detect_dead_letters_total')).toBe(1);
      const text = await (await fetch(`${url}/metrics`)).text();
      expect(text).toMatch(/^rankwatch_health_check_ok\{check="store"\} 1$/m);
      expect(text).toMatch(/^# TYPE rankwatch_detect_store_retries_total counter$/m);
      const res = await fetch(`${url}/healthz`);
      const body = await res.json();
      expect(res.status, JSON.stringify(body)).toBe(200);
      expect(body).toMatchObject({ ok: true, checks: { store: { ok: true } } });
    } finally {
      detect.kill('SIGTERM');
    }
    expect(await exited(detect, 60_000)).toBe(0);
    const lines = detect.log().trim().split('\n');
    for (const l of lines)
      expect(l).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARN|ERROR) rankwatch detect: /);
  }, 240_000);
});
