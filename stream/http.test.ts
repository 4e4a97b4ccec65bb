import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../api/app.js';
import { RankwatchError } from '../core/errors.js';
import { HttpPublisher } from './http.js';
import { MemoryTransport } from './memory.js';
import { DiskSpool } from './spool.js';
import { SpoolingPublisher } from './spool-publisher.js';

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

/** A bare node:http server on 127.0.0.1 that hands each request's gunzipped JSON lines to `reply`. */
async function serve(
  reply: (events: unknown[], req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ url: string; close: () => Promise<void> }> {
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = gunzipSync(Buffer.concat(chunks)).toString('utf8');
      const events = text
        .split('\n')
        .filter((l) => l.trim() !== '')
        .map((l) => JSON.parse(l) as unknown);
      reply(events, req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

const send = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
};

const failure = (p: Promise<unknown>) =>
  p.then(
    () => undefined,
    (e: unknown) => e as RankwatchError,
  );

describe('HttpPublisher: bad answers from the endpoint', () => {
  let server: { url: string; close: () => Promise<void> } | undefined;
  const dirs: string[] = [];
  afterEach(async () => {
    await server?.close();
    server = undefined;
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('413: halves the batch until each request fits, and every event arrives once, in order', async () => {
    const LIMIT = 3;
    const sizes: number[] = [];
    const got: number[] = [];
    server = await serve((events, _req, res) => {
      sizes.push(events.length);
      if (events.length > LIMIT) return send(res, 413, { message: 'body too large' });
      got.push(...events.map((e) => (e as { gpu: number }).gpu));
      send(res, 200, { accepted: events.length, rejected: 0 });
    });
    const p = new HttpPublisher({ url: server.url });
    const events = Array.from({ length: 10 }, (_, i) => gpu(i));
    await p.publish([{ key: 'host:h1', events }]);
    expect(got).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    // 10 → 5+5 → (3+2)+(3+2): three refused requests, four accepted ones.
    expect(sizes).toEqual([10, 5, 3, 2, 5, 3, 2]);
    expect(p.counters()).toMatchObject({ requests: 7, sent_events: 10, rejected_events: 0 });
  });

  it('an event over the body limit on its own is refused alone, counted with its reason; the rest arrive', async () => {
    // The real ingest app with a small body limit: fastify itself answers 413.
    const bus = new MemoryTransport();
    const got: unknown[] = [];
    await bus.consume(async (d) => {
      got.push(...d.events);
    });
    const app = await buildApp({ publisher: bus, bodyLimit: 64 << 10 });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const refused: string[] = [];
      const p = new HttpPublisher({ url, onRefused: (_e, reason) => refused.push(reason) });
      const events: Record<string, unknown>[] = Array.from({ length: 40 }, (_, i) => gpu(i));
      // Random bytes do not compress: this one event is over the limit even gzipped.
      events[17] = { ...gpu(17), note: randomBytes(200 << 10).toString('base64') };
      await p.publish([{ key: 'host:h1', events }]);
      await bus.drain();
      expect((got as { gpu: number }[]).map((e) => e.gpu)).toEqual(
        Array.from({ length: 40 }, (_, i) => i).filter((i) => i !== 17),
      );
      expect(refused).toHaveLength(1);
      expect(refused[0]).toMatch(/HTTP 413/);
      expect(p.counters()).toMatchObject({ sent_events: 39, refused_events: 1 });
    } finally {
      await app.close();
      await bus.stop();
    }
  });

  for (const status of [429, 500, 502, 503]) {
    it(`${status} is a retriable RANKWATCH_ERR_TRANSPORT_UNAVAILABLE that names the status`, async () => {
      server = await serve((_events, _req, res) => send(res, status, { message: 'busy' }));
      const p = new HttpPublisher({ url: server.url });
      const err = await failure(p.publish([{ key: 'k', events: [gpu(1)] }]));
      expect(err).toBeInstanceOf(RankwatchError);
      expect(err).toMatchObject({ code: 'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE', retriable: true });
      expect(err?.message).toContain(`HTTP ${status}`);
      expect(p.counters()).toMatchObject({ requests: 1, sent_events: 0, failed_requests: 1 });
    });
  }

  for (const status of [404, 405, 415]) {
    it(`${status} (wrong URL or endpoint) is a non-retriable RANKWATCH_ERR_CONFIG`, async () => {
      server = await serve((_events, _req, res) => send(res, status, { message: 'nope' }));
      const p = new HttpPublisher({ url: server.url });
      const err = await failure(p.publish([{ key: 'k', events: [gpu(1)] }]));
      expect(err).toBeInstanceOf(RankwatchError);
      expect(err).toMatchObject({ code: 'RANKWATCH_ERR_CONFIG', retriable: false });
      expect(err?.message).toContain(`HTTP ${status}`);
    });
  }

  it('a request that hangs past timeoutMs is a retriable RANKWATCH_ERR_TRANSPORT_UNAVAILABLE', async () => {
    let received = 0;
    server = await serve(() => {
      received++; // never answers
    });
    const p = new HttpPublisher({ url: server.url, timeoutMs: 200 });
    const started = Date.now();
    const err = await failure(p.publish([{ key: 'k', events: [gpu(1)] }]));
    const took = Date.now() - started;
    expect(received).toBe(1);
    expect(err).toBeInstanceOf(RankwatchError);
    expect(err).toMatchObject({ code: 'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE', retriable: true });
    expect(took).toBeGreaterThanOrEqual(150);
    expect(took).toBeLessThan(5_000);
    expect(p.counters()).toMatchObject({ failed_requests: 1, sent_events: 0 });
  });

  it('stop is idempotent; publishing afterwards rejects with RANKWATCH_ERR_STOPPED and sends nothing', async () => {
    let calls = 0;
    server = await serve((events, _req, res) => {
      calls++;
      send(res, 200, { accepted: events.length, rejected: 0 });
    });
    const p = new HttpPublisher({ url: server.url });
    await p.publish([{ key: 'k', events: [gpu(1)] }]);
    await p.stop();
    await expect(p.stop()).resolves.toBeUndefined();
    const err = await failure(p.publish([{ key: 'k', events: [gpu(2)] }]));
    expect(err).toBeInstanceOf(RankwatchError);
    expect(err).toMatchObject({ code: 'RANKWATCH_ERR_STOPPED', retriable: false });
    expect(calls).toBe(1);
    expect(p.counters().requests).toBe(1);
  });

  it('a SpoolingPublisher keeps batches through a 503 and replays them once the endpoint recovers', async () => {
    let status = 503;
    const got: number[] = [];
    server = await serve((events, _req, res) => {
      if (status !== 200) return send(res, status, { message: 'overloaded' });
      got.push(...events.map((e) => (e as { gpu: number }).gpu));
      send(res, 200, { accepted: events.length, rejected: 0 });
    });
    const dir = mkdtempSync(join(tmpdir(), 'rankwatch-http-spool-'));
    dirs.push(dir);
    const p = new SpoolingPublisher(
      new HttpPublisher({ url: server.url }),
      new DiskSpool({ dir, maxBytes: 1 << 20 }),
      {
        backoffMs: 20,
        maxBackoffMs: 50,
      },
    );
    await p.publish([{ key: 'host:h1', events: [gpu(0), gpu(1)] }]);
    expect(p.spooledBytes()).toBeGreaterThan(0);
    expect(got).toEqual([]);
    status = 200;
    await p.flushed();
    expect(got).toEqual([0, 1]);
    expect(p.counters()).toMatchObject({ spooled_batches: 1, replayed_batches: 1 });
    await p.stop();
  });
});
