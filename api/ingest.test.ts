import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeBatch } from '../stream/codec.js';
import { MemoryTransport } from '../stream/memory.js';
import type { Delivery } from '../stream/transport.js';
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
  return { app, bus, events };
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

  it('keeps good lines and answers 400 with line numbers and reasons for the bad ones', async () => {
    const { app, bus, events } = await setup();
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
    expect(r.statusCode).toBe(400);
    const j = r.json();
    expect(j.accepted).toBe(2);
    expect(j.rejected).toBe(3);
    expect(j.errors.map((e: { line: number }) => e.line)).toEqual([2, 4, 5]);
    expect(j.errors[0].reason).toMatch(/not valid JSON/);
    expect(j.errors[1].reason).toMatch(/step_ms/);
    expect(j.errors[2].reason).toMatch(/unknown kind "weather"/);
    expect(((await events()) as { rank: number }[]).map((e) => e.rank)).toEqual([0, 3]);
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
});
