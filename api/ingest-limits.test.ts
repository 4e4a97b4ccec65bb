/**
 * The bounds of POST /v1/ingest as a client meets them, on `rankwatch up`'s route and on the
 * collector's local port: a body past a request's limits is a 413 and one past what all requests
 * may hold at once a 429 with Retry-After, each a one-line reason with its code, nothing of the
 * body published; over a real socket the reply reaches a client that is still sending; the Node
 * collector splits on a 413 and keeps its batch on a 429.
 */
import { gzipSync } from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { startHealthServer } from '../collectors/health.js';
import { RankwatchError } from '../core/errors.js';
import { HttpPublisher } from '../stream/http.js';
import { IngestBudget } from '../stream/ingest-limits.js';
import type { Batch, Publisher } from '../stream/transport.js';
import { refusedForEvents } from '../tests/helpers.js';
import { buildApp } from './app.js';

const gpu = (i: number) => ({
  v: 1,
  kind: 'gpu',
  ts: 1_764_480_000_000 + i,
  host: `gpu-${String(i % 97).padStart(4, '0')}`,
  gpu: i % 8,
  sm_clock_mhz: 1980,
  throttle_reasons: 0,
});
const lines = (n: number, from = 0) =>
  `${Array.from({ length: n }, (_, i) => JSON.stringify(gpu(from + i))).join('\n')}\n`;

/** A publisher that keeps what it is given; while `held`, each publish waits until `let()` is called. */
function capture() {
  const published: Batch[] = [];
  let gate: Promise<void> | undefined;
  let open = () => {};
  let waiting = 0;
  const p: Publisher & {
    hold(): void;
    let(): void;
    waiting(): number;
    events(): unknown[];
    published(): Batch[];
  } = {
    type: 'capture',
    async publish(b) {
      waiting++;
      await gate;
      waiting--;
      published.push(...b);
    },
    stop: async () => {},
    hold() {
      gate = new Promise((r) => {
        open = r;
      });
    },
    let() {
      gate = undefined;
      open();
    },
    waiting: () => waiting,
    events: () => published.flatMap((b) => b.events),
    published: () => published,
  };
  return p;
}

const until = async (what: string, ok: () => boolean) => {
  const end = Date.now() + 30_000;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
};

let app: FastifyInstance | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

describe('POST /v1/ingest bounds', () => {
  it('a body over the events a request may send: 413 with the reason and code, no Retry-After, nothing published', async () => {
    const bus = capture();
    app = await buildApp({ publisher: bus, maxIngestEvents: 100 });
    for (const payload of [lines(101), gzipSync(lines(101)), `${lines(100)}not json\n`]) {
      const r = await app.inject({ method: 'POST', url: '/v1/ingest', payload });
      expect(r.statusCode).toBe(413);
      expect(r.headers['retry-after']).toBeUndefined();
      expect(r.json()).toEqual(refusedForEvents(100));
    }
    expect(bus.events()).toEqual([]);
    const full = await app.inject({
      method: 'POST',
      url: '/v1/ingest',
      payload: gzipSync(`\n${lines(100)}\n\n`),
    });
    expect(full.json()).toEqual({ accepted: 100, rejected: 0 });
    expect(bus.events()).toHaveLength(100);
  });

  it('a large request reaches the bus in batches of at most 5,000 events per job, in order', async () => {
    const bus = capture();
    app = await buildApp({ publisher: bus });
    const events = Array.from({ length: 12_000 }, (_, i) => ({ ...gpu(i), job: i % 3 === 0 ? 'a' : 'b' }));
    const r = await app.inject({
      method: 'POST',
      url: '/v1/ingest',
      payload: gzipSync(`${events.map((e) => JSON.stringify(e)).join('\n')}\n`),
    });
    expect(r.json()).toEqual({ accepted: 12_000, rejected: 0 });
    const batches = bus.published();
    expect(batches.map((b) => [b.key, b.events.length])).toEqual([
      ['a', 4000],
      ['b', 5000],
      ['b', 3000],
    ]);
    for (const key of ['a', 'b'])
      expect(batches.filter((b) => b.key === key).flatMap((b) => b.events)).toEqual(
        events.filter((e) => e.job === key),
      );
  });

  it('a body holding more JSON lines than a request may, once gunzipped: 413', async () => {
    const bus = capture();
    app = await buildApp({ publisher: bus, maxInflatedBytes: 64 << 10 });
    const big = lines(1000); // ~130 KB
    const gz = await app.inject({ method: 'POST', url: '/v1/ingest', payload: gzipSync(big) });
    expect(gz.statusCode).toBe(413);
    expect(gz.json().message).toBe(
      'gzip body inflates past 65536 bytes, the most one request may hold: split it into smaller batches; nothing of it was accepted',
    );
    const plain = await app.inject({ method: 'POST', url: '/v1/ingest', payload: big });
    expect(plain.statusCode).toBe(413);
    expect(plain.json().message).toMatch(/^body is past 65536 bytes/);
    expect(bus.events()).toEqual([]);
  });

  it('429 with Retry-After while requests waiting on the log hold the in-flight bytes; the same body is taken once they are answered', async () => {
    const bus = capture();
    const budget = new IngestBudget(32 << 10);
    app = await buildApp({ publisher: bus, ingestBudget: budget });
    const body = gzipSync(lines(200)); // ~21 KB of JSON lines
    bus.hold();
    const first = app.inject({ method: 'POST', url: '/v1/ingest', payload: body });
    await until('the first request in publish', () => bus.waiting() === 1);
    expect(budget.bytes()).toBeGreaterThan(16 << 10);
    const busy = await app.inject({ method: 'POST', url: '/v1/ingest', payload: body });
    expect(busy.statusCode).toBe(429);
    expect(busy.headers['retry-after']).toBe('1');
    expect(busy.json()).toEqual({
      statusCode: 429,
      error: 'Too Many Requests',
      code: 'RANKWATCH_ERR_INGEST_BUSY',
      accepted: 0,
      rejected: 0,
      message: `ingest is busy: requests in flight hold the ${32 << 10} bytes this server takes at once; nothing of this one was accepted, send it again in 1 s`,
    });
    bus.let();
    expect((await first).json()).toEqual({ accepted: 200, rejected: 0 });
    expect(budget.bytes()).toBe(0);
    const again = await app.inject({ method: 'POST', url: '/v1/ingest', payload: body });
    expect(again.json()).toEqual({ accepted: 200, rejected: 0 });
    expect(bus.events()).toHaveLength(400);
    expect(budget.bytes()).toBe(0);
    expect(budget.refused).toEqual({ too_large: 0, busy: 1 });
  });

  it('over a real socket, a client still sending gets the 413, and the server takes its next request', async () => {
    const bus = capture();
    app = await buildApp({ publisher: bus, maxIngestEvents: 1000 });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    // 20 MB of plain JSON lines: refused after ~110 KB; the rest is read and dropped.
    const refused = await fetch(`${url}/v1/ingest`, { method: 'POST', body: lines(150_000) });
    expect(refused.status).toBe(413);
    expect((await refused.json()).message).toMatch(/more than 1000 events/);
    const next = await fetch(`${url}/v1/ingest`, { method: 'POST', body: lines(10) });
    expect(next.status).toBe(200);
    expect(bus.events()).toHaveLength(10);
  });

  it('the Node collector splits a batch the server refuses for its events, and keeps one refused as busy', async () => {
    const bus = capture();
    const budget = new IngestBudget(16 << 10);
    app = await buildApp({
      publisher: bus,
      maxIngestEvents: 10,
      ingestBudget: budget,
      ingestRatePerSecond: 0,
    });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    const p = new HttpPublisher({ url });
    const events = Array.from({ length: 64 }, (_, i) => gpu(i));
    await p.publish([{ key: 'host:x', events }]);
    expect(bus.events()).toEqual(events);
    expect(p.counters()).toMatchObject({ sent_events: 64, refused_events: 0 });
    // Busy: another request holds ~10 KB of the 16; the collector gets a retriable error and keeps its batch.
    const padded = (n: number, pad: number) =>
      Array.from({ length: n }, (_, i) => ({ ...gpu(i), note: 'x'.repeat(pad) }));
    bus.hold();
    const holder = new HttpPublisher({ url }).publish([{ key: 'host:x', events: padded(10, 900) }]);
    await until('the holder in publish', () => bus.waiting() === 1);
    const err = await new HttpPublisher({ url }).publish([{ key: 'host:x', events: padded(10, 600) }]).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RankwatchError);
    expect(err).toMatchObject({ code: 'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE', retriable: true });
    expect((err as Error).message).toMatch(/HTTP 429: .*ingest is busy/);
    bus.let();
    await holder;
    expect(bus.events()).toHaveLength(64 + 10);
  });
});

describe("the collector's local POST /v1/ingest has the same bounds", () => {
  it('413 past the events, 429 with Retry-After while busy, nothing handed off from either', async () => {
    const handed: unknown[] = [];
    let release = () => {};
    let hold: Promise<void> | undefined;
    const budget = new IngestBudget(3 << 10);
    const local = await startHealthServer('127.0.0.1', 0, {
      counters: () => ({}) as never,
      ingest: async (events) => {
        await hold;
        handed.push(...events);
      },
      ingestLimits: { maxEvents: 20 },
      ingestBudget: budget,
    });
    try {
      const post = (body: string | Uint8Array) =>
        fetch(`${local.url}/v1/ingest`, { method: 'POST', body: body as BodyInit });
      const over = await post(gzipSync(lines(21)));
      expect(over.status).toBe(413);
      expect(await over.json()).toEqual({
        accepted: 0,
        rejected: 0,
        code: 'RANKWATCH_ERR_INGEST_TOO_LARGE',
        message:
          'body holds more than 20 events, the most one request may send: split it into batches of at most 20; nothing of it was accepted',
      });
      hold = new Promise((r) => {
        release = r;
      });
      const holder = post(lines(20)); // ~2.2 KB of the 3, waits in the hand-off
      await until('the holder to take its bytes', () => budget.bytes() > 0);
      const busy = await post(lines(15, 20)); // ~1.6 KB more

      expect(busy.status).toBe(429);
      expect(busy.headers.get('retry-after')).toBe('1');
      expect((await busy.json()).code).toBe('RANKWATCH_ERR_INGEST_BUSY');
      expect(handed).toEqual([]);
      release();
      expect(await (await holder).json()).toEqual({ accepted: 20, rejected: 0 });
      expect(handed).toHaveLength(20);
      expect(budget.bytes()).toBe(0);
    } finally {
      await local.close();
    }
  });
});
