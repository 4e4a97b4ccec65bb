import { randomBytes } from 'node:crypto';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import { encodeBatch } from '../stream/codec.js';
import { HttpPublisher } from '../stream/http.js';
import { MemoryTransport } from '../stream/memory.js';
import { DiskSpool } from '../stream/spool.js';
import type { Batch, Delivery, Publisher } from '../stream/transport.js';
import { WalTransport } from '../stream/wal.js';
import { buildApp } from './app.js';

const step = (rank: number, job = 'j1') => ({
  v: 1,
  kind: 'step',
  ts: 1_764_480_000_000,
  job,
  rank,
  host: 'gpu-0001',
  gpu: rank % 8,
  step: 1,
  step_ms: 1000,
  compute_ms: 800,
});

async function setup(token?: string) {
  const bus = new MemoryTransport();
  const got: Delivery[] = [];
  await bus.consume(async (d) => {
    got.push(d);
  });
  const app = await buildApp({ publisher: bus, auth: { ingestToken: token } });
  const events = async () => {
    await bus.drain();
    return got.flatMap((d) => d.events);
  };
  return { app, bus, events, got };
}

let cleanup: (() => Promise<void>) | undefined;
afterEach(async () => {
  await cleanup?.();
  cleanup = undefined;
});

describe('POST /v1/ingest', () => {
  it('publishes JSON lines, plain or gzip, keyed by job', async () => {
    const { app, bus, events } = await setup();
    cleanup = async () => {
      await app.close();
      await bus.stop();
    };
    const plain = await app.inject({
      method: 'POST',
      url: '/v1/ingest',
      payload: encodeBatch([step(0), step(1, 'j2')]),
    });
    expect(plain.statusCode).toBe(200);
    expect(plain.json()).toEqual({ accepted: 2, rejected: 0 });
    const gz = await app.inject({
      method: 'POST',
      url: '/v1/ingest',
      headers: { 'content-type': 'application/x-ndjson', 'content-encoding': 'gzip' },
      payload: encodeBatch([step(2)], true),
    });
    expect(gz.json()).toEqual({ accepted: 1, rejected: 0 });
    const got = (await events()) as { rank: number }[];
    expect(got.map((e) => e.rank).sort()).toEqual([0, 1, 2]);
    expect(bus.counters().published_batches).toBe(3);
  });

  it('keeps good lines and answers 200 (400 when none was good) with line numbers and reasons for the bad ones, which it passes on to be kept', async () => {
    const { app, bus, events, got } = await setup();
    cleanup = async () => {
      await app.close();
      await bus.stop();
    };
    const body = [
      JSON.stringify(step(0)),
      '{"v":1,"kind":"step",',
      '',
      JSON.stringify({ ...step(1), step_ms: 'slow' }),
      JSON.stringify({ v: 1, kind: 'weather', ts: 1 }),
      JSON.stringify(step(3)),
    ].join('\n');
    const r = await app.inject({
      method: 'POST',
      url: '/v1/ingest',
      headers: { 'content-type': 'text/plain' },
      payload: body,
    });
    expect(r.statusCode).toBe(200);
    const j = r.json();
    expect(j.accepted).toBe(2);
    expect(j.rejected).toBe(3);
    expect(j.message).toBe('2 event(s) accepted, 3 line(s) rejected and kept as dead letters');
    expect(j.errors.map((e: { line: number }) => e.line)).toEqual([2, 4, 5]);
    expect(j.errors[0].reason).toMatch(/not valid JSON/);
    expect(j.errors[1].reason).toMatch(/step_ms/);
    expect(j.errors[2].reason).toMatch(/unknown kind "weather"/);
    expect(((await events()) as { rank: number }[]).map((e) => e.rank)).toEqual([0, 3]);
    // The rejected lines go on the bus as they were sent, for the pipeline's dead letters.
    const rejects = got.flatMap((d) => d.undecodable ?? []);
    expect(rejects.map((u) => [u.line, u.raw])).toEqual([
      [2, '{"v":1,"kind":"step",'],
      [4, JSON.stringify({ ...step(1), step_ms: 'slow' })],
      [5, JSON.stringify({ v: 1, kind: 'weather', ts: 1 })],
    ]);
    expect(rejects[0].reason).toMatch(/^ingest line 2 \(token anonymous\): not valid JSON/);
    const none = await app.inject({ method: 'POST', url: '/v1/ingest', payload: 'not json\n' });
    expect(none.statusCode).toBe(400);
    expect(none.json()).toMatchObject({ accepted: 0, rejected: 1, errors: [{ line: 1 }] });
  });

  it('rejects bad gzip and empty bodies with a 400 that says why', async () => {
    const { app, bus } = await setup();
    cleanup = async () => {
      await app.close();
      await bus.stop();
    };
    const bad = Buffer.concat([gzipSync('x').subarray(0, 6)]);
    const r = await app.inject({ method: 'POST', url: '/v1/ingest', payload: bad });
    expect(r.statusCode).toBe(400);
    expect(r.json().message).toMatch(/gzip/);
    const e = await app.inject({ method: 'POST', url: '/v1/ingest' });
    expect(e.statusCode).toBe(400);
  });

  it('requires the bearer token when one is configured', async () => {
    const { app, bus, events } = await setup('s3cret');
    cleanup = async () => {
      await app.close();
      await bus.stop();
    };
    const payload = encodeBatch([step(0)]);
    const none = await app.inject({ method: 'POST', url: '/v1/ingest', payload });
    expect(none.statusCode).toBe(401);
    expect(none.headers['www-authenticate']).toMatch(/Bearer/);
    const wrong = await app.inject({
      method: 'POST',
      url: '/v1/ingest',
      payload,
      headers: { authorization: 'Bearer nope' },
    });
    expect(wrong.statusCode).toBe(401);
    const ok = await app.inject({
      method: 'POST',
      url: '/v1/ingest',
      payload,
      headers: { authorization: 'Bearer s3cret' },
    });
    expect(ok.statusCode).toBe(200);
    expect(await events()).toHaveLength(1);
  });

  it('GET /healthz answers with the figures the server adds', async () => {
    const bus = new MemoryTransport();
    const app = await buildApp({ publisher: bus, health: () => ({ events: 7 }) });
    cleanup = async () => {
      await app.close();
      await bus.stop();
    };
    const r = await app.inject({ method: 'GET', url: '/healthz' });
    expect(r.statusCode).toBe(200);
    expect(r.json()).toMatchObject({ ok: true, events: 7 });
  });

  it('a publisher that fails for a while: 503 with the error code and Retry-After, which a collector retries', async () => {
    let calls = 0;
    const down: Publisher = {
      type: 'down',
      publish: async () => {
        calls++;
        throw new RankwatchError('RANKWATCH_ERR_TRANSPORT_UNAVAILABLE', 'bus is down');
      },
      stop: async () => {},
    };
    const app = await buildApp({ publisher: down });
    cleanup = () => app.close();
    const r = await app.inject({ method: 'POST', url: '/v1/ingest', payload: encodeBatch([step(0)]) });
    expect(r.statusCode).toBe(503);
    expect(r.headers['retry-after']).toBe('1');
    expect(r.json()).toMatchObject({ code: 'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE' });
    expect(r.json().message).toMatch(/^bus is down; nothing was accepted/);
    expect(r.json()).not.toHaveProperty('accepted');
    expect(calls).toBe(1);
    // What the Node collector makes of it, over a real socket: retriable, so it spools and retries.
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    const err = await new HttpPublisher({ url }).publish([{ key: 'j1', events: [step(0)] }]).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RankwatchError);
    expect(err).toMatchObject({ code: 'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE', retriable: true });
    expect((err as Error).message).toContain('HTTP 503');
    expect(calls).toBe(2);
  });

  it('a bus stopped under a waiting request answers 500, not 200 (the events were not taken)', async () => {
    const bus = new MemoryTransport({ maxQueuedBatches: 1 });
    await bus.consume(() => new Promise<void>(() => {})); // never acknowledges
    await bus.publish([{ key: 'j1', events: [step(9)] }]); // the queue is full
    // Stop the bus only once the request is waiting in publish (a fixed sleep could stop it before
    // the request got there on a loaded machine, and then the test would not test the wait).
    let waiting = false;
    const publisher = {
      type: 'memory',
      publish: (b: Parameters<typeof bus.publish>[0]) => {
        waiting = true;
        return bus.publish(b);
      },
      stop: () => bus.stop(),
    };
    const app = await buildApp({ publisher });
    cleanup = () => app.close();
    const pending = app.inject({ method: 'POST', url: '/v1/ingest', payload: encodeBatch([step(0)]) });
    while (!waiting) await new Promise((r) => setTimeout(r, 5));
    await bus.stop();
    const r = await pending;
    expect(r.statusCode).toBe(500);
    expect(r.json()).toMatchObject({ code: 'RANKWATCH_ERR_STOPPED' });
  });

  it(`lists at most 50 rejected lines (the first ones) but counts them all`, async () => {
    const published: Batch[] = [];
    const bus: Publisher = {
      type: 'capture',
      publish: async (b) => {
        published.push(...b);
      },
      stop: async () => {},
    };
    const app = await buildApp({ publisher: bus });
    cleanup = () => app.close();
    // Lines 1-60: valid JSON but not a valid event; 61-70: not JSON at all; 71: a good event.
    const lines = [
      ...Array.from({ length: 60 }, (_, i) => JSON.stringify({ ...step(i), step_ms: 'slow' })),
      ...Array.from({ length: 10 }, () => '{"v":1,'),
      JSON.stringify(step(99)),
    ];
    const r = await app.inject({ method: 'POST', url: '/v1/ingest', payload: lines.join('\n') });
    expect(r.statusCode).toBe(200);
    const j = r.json();
    expect(j.accepted).toBe(1);
    expect(j.rejected).toBe(70);
    expect(j.errors).toHaveLength(50);
    expect(j.errors.map((e: { line: number }) => e.line)).toEqual(
      Array.from({ length: 50 }, (_, i) => i + 1),
    );
    expect(published.flatMap((b) => b.events)).toEqual([step(99)]);
  });

  it('a body over bodyLimit is refused with 413 and nothing is published', async () => {
    const bus = new MemoryTransport();
    const got: unknown[] = [];
    await bus.consume(async (d) => {
      got.push(...d.events);
    });
    const app = await buildApp({ publisher: bus, bodyLimit: 1024 });
    cleanup = async () => {
      await app.close();
      await bus.stop();
    };
    const big = encodeBatch(Array.from({ length: 20 }, (_, i) => step(i)));
    expect(big.length).toBeGreaterThan(1024);
    const r = await app.inject({ method: 'POST', url: '/v1/ingest', payload: big });
    expect(r.statusCode).toBe(413);
    await bus.drain();
    expect(got).toEqual([]);
    const small = await app.inject({ method: 'POST', url: '/v1/ingest', payload: encodeBatch([step(0)]) });
    expect(small.statusCode).toBe(200);
  });

  it('a small gzip body that inflates past the limit (a gzip bomb) is refused with 413', async () => {
    const bus = new MemoryTransport();
    const got: unknown[] = [];
    await bus.consume(async (d) => {
      got.push(...d.events);
    });
    const app = await buildApp({ publisher: bus, maxInflatedBytes: 1 << 20 });
    cleanup = async () => {
      await app.close();
      await bus.stop();
    };
    const bomb = gzipSync(Buffer.alloc(8 << 20, 0x20)); // 8 MiB of spaces in ~8 KiB
    expect(bomb.length).toBeLessThan(64 << 10);
    const r = await app.inject({ method: 'POST', url: '/v1/ingest', payload: bomb });
    expect(r.statusCode).toBe(413);
    expect(r.json().message).toMatch(/inflates past 1048576 bytes/);
    const ok = await app.inject({ method: 'POST', url: '/v1/ingest', payload: encodeBatch([step(0)], true) });
    expect(ok.statusCode).toBe(200);
    await bus.drain();
    expect(got).toEqual([step(0)]);
  });

  it('the HTTP publisher gets a batch over bodyLimit through by splitting it', async () => {
    const bus = new MemoryTransport();
    const got: { rank: number }[] = [];
    await bus.consume(async (d) => {
      got.push(...(d.events as { rank: number }[]));
    });
    // Random host names defeat gzip: 64 events are several KiB even compressed.
    const events = Array.from({ length: 64 }, (_, i) => ({
      ...step(i),
      host: `gpu-${randomBytes(32).toString('hex')}`,
    }));
    const app = await buildApp({ publisher: bus, bodyLimit: 1024 });
    cleanup = async () => {
      await app.close();
      await bus.stop();
    };
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    const p = new HttpPublisher({ url });
    await p.publish([{ key: 'j1', events }]);
    await bus.drain();
    expect(got.map((e) => e.rank)).toEqual(events.map((e) => e.rank));
    const c = p.counters();
    expect(c.sent_events).toBe(64);
    expect(c.requests).toBeGreaterThan(2);
  });
});

describe('POST /v1/ingest through the write-ahead log, as `rankwatch up` runs it', () => {
  async function walSetup() {
    const dir = mkdtempSync(join(tmpdir(), 'rankwatch-ingest-wal-'));
    const bus = new MemoryTransport({ maxQueuedBatches: 64, partitions: 1 });
    const wal = new WalTransport(bus, { dir });
    const app = await buildApp({ publisher: wal, ingestRatePerSecond: 0 });
    cleanup = async () => {
      await app.close();
      await wal.stop();
      await wal.close();
      rmSync(dir, { recursive: true, force: true });
    };
    return { dir, wal, app };
  }
  const post = (app: FastifyInstance, payload: string | Buffer) =>
    app.inject({ method: 'POST', url: '/v1/ingest', payload });

  it('concurrent requests share journal writes, and each is answered only once its events are in the journal', async () => {
    const { dir, wal, app } = await walSetup();
    // No consumer yet: every answered batch must still be in the journal, in answer order.
    const replies = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        post(app, encodeBatch([step(i, `job-${i}`), step(i, `job-${i}`)])),
      ),
    );
    expect(replies.map((r) => r.statusCode)).toEqual(Array(16).fill(200));
    const c = wal.counters();
    expect(c.wal_logged_batches).toBe(16);
    expect(c.wal_writes).toBeGreaterThanOrEqual(1);
    expect(c.wal_writes).toBeLessThan(16);
    const journal = await new DiskSpool({ dir, maxBytes: Number.MAX_SAFE_INTEGER }).read(100);
    expect(journal.map((b) => b.key).sort()).toEqual(Array.from({ length: 16 }, (_, i) => `job-${i}`).sort());
    // The bus delivers in journal order (the journal is acknowledged from its head).
    const delivered: string[] = [];
    await wal.consume(async (d) => {
      delivered.push(d.key);
    });
    await wal.drain();
    expect(delivered).toEqual(journal.map((b) => b.key));
    expect(wal.counters().wal_acked_batches).toBe(16);
    expect(wal.counters().wal_bytes).toBe(0);
  });

  it('journals and delivers each event as the text it was sent in, CRLF and bad lines aside', async () => {
    const { dir, wal, app } = await walSetup();
    const sent = [
      '{ "v": 1, "kind": "step", "ts": 1764480000000, "job": "j1", "rank": 0, "host": "gpu-0001", "gpu": 0, "step": 1, "step_ms": 1000, "compute_ms": 800, "extra": "kept" }',
      '{"v":1,"kind":"step",',
      `${JSON.stringify(step(1))}\t`,
      JSON.stringify({ ...step(2), step_ms: 'slow' }),
      JSON.stringify(step(3)),
    ];
    const r = await post(app, `${sent.join('\r\n')}\r\n`);
    expect(r.json()).toMatchObject({ accepted: 3, rejected: 2 });
    const kept = [sent[0], sent[2].trim(), sent[4]];
    const onDisk = readFileSync(join(dir, readdirSync(dir).find((f) => f.startsWith('seg-'))!), 'utf8');
    expect(onDisk).toContain(sent[0]);
    // A restart replays the same events from the journal (a copy, taken before they are stored).
    cpSync(dir, `${dir}-copy`, { recursive: true });
    const again = new WalTransport(new MemoryTransport({ partitions: 1 }), { dir: `${dir}-copy` });
    const replayed: Delivery[] = [];
    await again.consume(async (d) => {
      replayed.push(d);
    });
    expect(await again.recover()).toEqual({ batches: 2, events: 3 });
    await again.drain();
    await again.stop();
    await again.close();
    rmSync(`${dir}-copy`, { recursive: true, force: true });
    expect(replayed[0].events).toEqual(kept.map((l) => JSON.parse(l)));
    // As the text it was sent in, too: stored again after a crash, it is the same raw event (one copy).
    expect(replayed[0].lines).toEqual(kept);
    // The rejected lines are journaled with them: after a crash they still become dead letters.
    expect(replayed[1]).toMatchObject({ key: 'ingest', events: [] });
    expect(replayed[1].undecodable?.map((u) => [u.line, u.raw])).toEqual([
      [2, sent[1]],
      [4, sent[3]],
    ]);
    // The bus hands the pipeline each event's text, stored as the raw event without encoding it again.
    const got: Delivery[] = [];
    await wal.consume(async (d) => {
      got.push(d);
    });
    await wal.drain();
    expect(got[0].lines).toEqual(kept);
    expect(got[0].events).toEqual(kept.map((l) => JSON.parse(l)));
  });
});
