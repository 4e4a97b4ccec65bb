import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../api/app.js';
import { RankwatchError } from '../core/errors.js';
import { HttpPublisher } from './http.js';
import { MemoryTransport } from './memory.js';

const gpu = (i: number) => ({
  v: 1,
  kind: 'gpu',
  ts: 1,
  host: 'h1',
  gpu: i,
  sm_clock_mhz: 1980,
  throttle_reasons: 0,
});

describe('HttpPublisher → rankwatch ingest', () => {
  const bus = new MemoryTransport();
  const got: unknown[] = [];
  let url = '';
  let app: Awaited<ReturnType<typeof buildApp>>;

  beforeAll(async () => {
    await bus.consume(async (d) => {
      got.push(...d.events);
    });
    app = await buildApp({ publisher: bus, auth: { ingestToken: 'tok' } });
    url = await app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => {
    await app.close();
    await bus.stop();
  });

  it('posts gzip JSON lines with the token, split into requests', async () => {
    const p = new HttpPublisher({ url, token: 'tok', maxEventsPerRequest: 3 });
    await p.publish([{ key: 'host:h1', events: [0, 1, 2, 3, 4, 5, 6].map(gpu) }]);
    await bus.drain();
    expect(got).toHaveLength(7);
    expect(p.counters()).toMatchObject({ requests: 3, sent_events: 7, failed_requests: 0 });
    await p.stop();
  });

  it('reports rejected lines without throwing (the good ones were kept)', async () => {
    const seen: number[] = [];
    const p = new HttpPublisher({ url, token: 'tok', onRejected: (n) => seen.push(n) });
    await p.publish([{ key: 'k', events: [gpu(1), { v: 1, kind: 'gpu' }] }]);
    expect(seen).toEqual([1]);
    expect(p.counters()).toMatchObject({ sent_events: 1, rejected_events: 1 });
  });

  it('a wrong token is a non-retriable error', async () => {
    const p = new HttpPublisher({ url, token: 'nope' });
    const err = await p.publish([{ key: 'k', events: [gpu(1)] }]).catch((e) => e);
    expect(err).toBeInstanceOf(RankwatchError);
    expect(err.code).toBe('RANKWATCH_ERR_UNAUTHORIZED');
    expect(err.retriable).toBe(false);
  });

  it('an endpoint that is down is a retriable RANKWATCH_ERR_TRANSPORT_UNAVAILABLE', async () => {
    // A port that was free a moment ago: nothing listens there.
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const p = new HttpPublisher({ url: `http://127.0.0.1:${port}`, timeoutMs: 2000 });
    const err = await p.publish([{ key: 'k', events: [gpu(1)] }]).catch((e) => e);
    expect(err.code).toBe('RANKWATCH_ERR_TRANSPORT_UNAVAILABLE');
    expect(err.retriable).toBe(true);
  });
});
