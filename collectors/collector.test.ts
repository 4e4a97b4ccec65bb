import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { buildApp } from '../api/app.js';
import { RankwatchError } from '../core/errors.js';
import { Health } from '../core/health.js';
import { HttpPublisher } from '../stream/http.js';
import { MemoryTransport } from '../stream/memory.js';
import type { Batch, Publisher } from '../stream/transport.js';
import { Collector } from './collector.js';
import { loadCollectorConfig } from './config.js';
import { renderMetrics, startHealthServer } from './health.js';
import { createSources } from './index.js';
import { publisherFor } from './publisher.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-collector-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const quiet = { info: () => {}, warn: () => {} };

async function until(what: string, fn: () => boolean, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function ingest(port = 0, ingestToken?: string) {
  const bus = new MemoryTransport();
  const events: unknown[] = [];
  await bus.consume(async (d) => {
    events.push(...d.events);
  });
  const app = await buildApp({ publisher: bus, auth: { ingestToken } });
  const url = await app.listen({ host: '127.0.0.1', port });
  const close = async () => {
    await app.close();
    await bus.stop();
  };
  return { url, events, close };
}

describe('Collector', () => {
  it('a failing source is counted and retried; the others keep delivering', async () => {
    const rx = await ingest();
    const log = join(dir, 'mega.log');
    writeFileSync(
      log,
      ' iteration        1/     100 | consumed samples:          8 | elapsed time per iteration (ms): 1000.0 | global batch size:     8 |\n iteration        2/     100 | consumed samples:    \n',
    );
    const cfg = loadCollectorConfig(undefined, { bus: rx.url, host: 'n1', flushMs: 50 }, [
      { type: 'dcgm_exporter', url: 'http://127.0.0.1:1/metrics', intervalMs: 100, timeoutMs: 200 },
      { type: 'kernel_log', mode: 'file', path: join(dir, 'no-such.log'), pollMs: 50 },
      { type: 'megatron_log', path: log, from: 'start', job: 'j', rank: 3, gpu: 1, pollMs: 50 },
    ]);
    const { publisher, counters } = await publisherFor(cfg, quiet);
    const c = new Collector({ publisher, logger: quiet, flushMs: cfg.flushMs, extraCounters: counters });
    c.start(createSources(cfg.sources, c.deps(cfg.host)));
    await until('the step event', () => rx.events.some((e) => (e as { kind: string }).kind === 'step'));
    await until('source errors', () => Object.keys(c.counters().source_errors).length === 2);
    await c.stop();
    await c.stop();
    const k = c.counters();
    expect(k.source_errors).toHaveProperty('dcgm_exporter');
    expect(k.source_errors).toHaveProperty('kernel_log');
    expect(k.parse_errors).toEqual({ megatron_log: 1 });
    expect(k.events_sent).toBe(1);
    expect(rx.events[0]).toMatchObject({ kind: 'step', job: 'j', rank: 3, gpu: 1, host: 'n1', step: 1 });
    expect(renderMetrics(k)).toMatch(/rankwatch_collector_source_errors_total\{source="dcgm_exporter"\} \d+/);
    await rx.close();
  });

  it("learns ranks from the hooks' steps it relays, and counts a source's unusable records by reason", async () => {
    const rx = await ingest();
    const cfg = loadCollectorConfig(undefined, { bus: rx.url, host: 'n1', flushMs: 50 }, []);
    const { publisher } = await publisherFor(cfg, quiet);
    const c = new Collector({ publisher, logger: quiet, flushMs: cfg.flushMs });
    const deps = c.deps('n1');
    c.start([]);
    await c.handOff([
      {
        v: 1,
        kind: 'step',
        ts: 5000,
        job: 'j',
        rank: 12,
        host: 'n1',
        gpu: 4,
        pid: 3131,
        step: 2,
        step_ms: 900,
        compute_ms: 700,
      },
    ]);
    expect(deps.ranks?.lookup('n1', 3131)).toEqual({ job: 'j', rank: 12, host: 'n1', gpu: 4, via: 'hook' });
    expect(deps.ranks?.boundaries('j', 12)).toEqual([{ step: 2, endMs: 5000, stepMs: 900 }]);
    deps.dropped?.('nccl_inspector', 'unmapped_pid', 3, 'process 77 has no RANK');
    deps.dropped?.('nccl_inspector', 'unmapped_pid', 2);
    await until('the relayed step', () => rx.events.length === 1);
    await c.stop();
    const k = c.counters();
    expect(k.records_dropped).toEqual({ nccl_inspector: { unmapped_pid: 5 } });
    expect(k.events_dropped).toBe(0);
    expect(renderMetrics(k)).toContain(
      'rankwatch_collector_records_dropped_total{source="nccl_inspector",reason="unmapped_pid"} 5',
    );
    await rx.close();
  });

  it('spools to disk while ingest is down and delivers once it is back', async () => {
    // Reserve a port, then free it: the collector starts with nothing listening there.
    const holder: Server = createServer();
    await new Promise<void>((r) => holder.listen(0, '127.0.0.1', () => r()));
    const port = (holder.address() as { port: number }).port;
    await new Promise<void>((r) => holder.close(() => r()));
    const cfg = loadCollectorConfig(
      undefined,
      {
        bus: `http://127.0.0.1:${port}`,
        host: 'n1',
        spool: { dir: join(dir, 'spool'), maxBytes: 1 << 20 },
      },
      [],
    );
    const { publisher, counters } = await publisherFor(cfg, quiet);
    const c = new Collector({ publisher, logger: quiet, flushMs: 50, extraCounters: counters });
    const deps = c.deps('n1');
    c.start([]);
    deps.emit([{ v: 1, kind: 'gpu', ts: 1, host: 'n1', gpu: 0, sm_clock_mhz: 1980, throttle_reasons: 0 }]);
    // Wait for the signal the assertions read, not an earlier one: spooled_batches and spool_bytes
    // move together here, but replayed_batches moves only after the ingest has answered and the
    // spool has acknowledged on disk, well after the ingest sees the event on a loaded machine.
    await until(
      'the batch to be spooled',
      () => Number(c.counters().spooled_batches) === 1 && Number(c.counters().spool_bytes) > 0,
    );
    const rx = await ingest(port);
    await until('the replay to be acknowledged', () => Number(c.counters().replayed_batches) === 1, 60_000);
    expect(rx.events).toHaveLength(1);
    expect(Number(c.counters().spool_bytes)).toBe(0);
    await c.stop();
    await rx.close();
  });

  it('takes hook events on its local POST /v1/ingest and shows its counters on /metrics', async () => {
    const rx = await ingest();
    const c = new Collector({ publisher: new HttpPublisher({ url: rx.url }), logger: quiet, flushMs: 50 });
    const deps = c.deps('n1');
    c.start([]);
    const local = await startHealthServer('127.0.0.1', 0, {
      counters: () => c.counters(),
      ingest: deps.emit,
    });
    const step = {
      v: 1,
      kind: 'step',
      ts: 1,
      job: 'j',
      rank: 0,
      host: 'n1',
      gpu: 0,
      step: 1,
      step_ms: 9,
      compute_ms: 8,
    };
    const res = await fetch(`${local.url}/v1/ingest`, {
      method: 'POST',
      body: gzipSync(`${JSON.stringify(step)}\nnot json\n`),
    });
    expect(res.status).toBe(200); // some accepted: 200, counting the rejected line
    expect(await res.json()).toMatchObject({ accepted: 1, rejected: 1, errors: [{ line: 2 }] });
    // events_sent (read from /metrics below) counts once the upstream has answered, after it has
    // the event: wait for both.
    await until('the hook event upstream', () => rx.events.length === 1 && c.counters().events_sent === 1);
    const off = await startHealthServer('127.0.0.1', 0, {
      counters: () => c.counters(),
      ingest: deps.emit,
      ingestFrom: 'off',
    });
    expect((await fetch(`${off.url}/v1/ingest`, { method: 'POST', body: JSON.stringify(step) })).status).toBe(
      403,
    );
    await off.close();
    const metrics = await (await fetch(`${local.url}/metrics`)).text();
    expect(metrics).toMatch(/rankwatch_collector_events_sent_total 1/);
    await local.close();
    await c.stop();
    await rx.close();
  });

  it('bounds memory: past maxBufferedEvents the oldest are dropped and counted', async () => {
    const never = { type: 'never', publish: () => new Promise<void>(() => {}), stop: async () => {} };
    const c = new Collector({
      publisher: never,
      logger: quiet,
      maxBufferedEvents: 10,
      maxBatchEvents: 1000,
      flushMs: 10_000,
    });
    const deps = c.deps('h');
    deps.emit(Array.from({ length: 25 }, (_, i) => ({ i })));
    expect(c.counters()).toMatchObject({
      events_read: 25,
      buffered: 10,
      events_dropped: 15,
      dropped_by_reason: { buffer_full: 15 },
    });
  });

  it('accepts the example config shipped in deploy/collector', () => {
    const file = join(import.meta.dirname, '..', 'deploy', 'collector', 'collector.example.json');
    const cfg = loadCollectorConfig(file, {}, []);
    const deps = new Collector({ publisher: new MemoryTransport(), logger: quiet }).deps('h');
    expect(createSources(cfg.sources, deps).map((s) => s.type)).toEqual([
      'dcgm_exporter',
      'kernel_log',
      'megatron_log',
      'nccl_watchdog',
      'nccl_tests',
    ]);
  });

  it('rejects bad source configs with every problem named', () => {
    const deps = new Collector({ publisher: new MemoryTransport(), logger: quiet }).deps('h');
    expect(() =>
      createSources(
        [{ type: 'dcgm_exporter', intervalMs: 'fast' }, { type: 'nope' }, { type: 'megatron_log', bogus: 1 }],
        deps,
      ),
    ).toThrow(/sources\[0\]\.intervalMs[\s\S]*sources\[1\]\.type[\s\S]*sources\[2\]/);
  });

  it('keeps what a wrong token cannot deliver (spool and memory), says so on /healthz, and delivers it with the right token', async () => {
    const rx = await ingest(0, 'right');
    const gpuEvent = (i: number) => ({
      v: 1,
      kind: 'gpu',
      ts: 1,
      host: 'n1',
      gpu: i,
      sm_clock_mhz: 1980,
      throttle_reasons: 0,
    });
    const spool = { dir: join(dir, 'spool-token'), maxBytes: 1 << 20 };
    const start = async (token: string, withSpool: boolean) => {
      const cfg = loadCollectorConfig(
        undefined,
        { bus: rx.url, host: 'n1', token, ...(withSpool ? { spool } : {}) },
        [],
      );
      const health = new Health();
      const { publisher, counters } = await publisherFor(cfg, quiet, health);
      const c = new Collector({ publisher, logger: quiet, flushMs: 50, extraCounters: counters });
      const server = await startHealthServer('127.0.0.1', 0, {
        counters: () => c.counters(),
        ingest: () => {},
        health,
      });
      c.start([]);
      return { c, deps: c.deps('n1'), server, health };
    };
    const healthz = async (url: string) => {
      const r = await fetch(`${url}/healthz`);
      return {
        status: r.status,
        body: (await r.json()) as { checks: Record<string, { ok: boolean; reason?: string }> },
      };
    };

    // Without a spool: kept in memory, retried, not-ok.
    const mem = await start('wrong', false);
    mem.deps.emit([gpuEvent(0), gpuEvent(1)]);
    await until('a refused publish', () => mem.c.counters().publish_errors >= 2);
    const h = await healthz(mem.server.url);
    expect(h.status).toBe(503);
    expect(h.body.checks.credentials).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/refused the token \(HTTP 401\)/),
    });
    expect(mem.c.counters()).toMatchObject({ buffered: 2, events_dropped: 0 });
    expect(await mem.c.stop()).toBe(2); // abandoned, and said so
    await mem.server.close();

    // With a spool: on disk, and a restart with the rotated token delivers it.
    const a = await start('wrong', true);
    a.deps.emit([gpuEvent(2), gpuEvent(3), gpuEvent(4)]);
    await until('the batch spooled', () => Number(a.c.counters().spooled_batches) >= 1);
    await until('the credentials check failing', () => a.health.report().checks.credentials?.ok === false);
    expect((await healthz(a.server.url)).status).toBe(503);
    expect(a.c.counters().events_dropped).toBe(0);
    expect(await a.c.stop()).toBe(0);
    await a.server.close();
    expect(rx.events).toHaveLength(0);

    const b = await start('right', true);
    await until('the spooled events delivered', () => rx.events.length === 3);
    await until('ok again', () => b.health.report().ok);
    expect((await healthz(b.server.url)).status).toBe(200);
    await b.c.stop();
    await b.server.close();
    await rx.close();
  });

  it('one event the bus refuses on its own costs only itself: the rest of its batch of 5,000 is delivered', async () => {
    // The broker's rule (max.message.bytes, 1 MiB) in front of a real bus: a publish whose
    // batches encode past it is refused with TRANSPORT_REJECTED, as stream/kafka.ts reports it.
    const bus = new MemoryTransport({ maxQueuedBatches: 100_000 });
    const got: unknown[] = [];
    await bus.consume(async (d) => {
      got.push(...d.events);
    });
    const limited: Publisher = {
      type: 'limited',
      async publish(batches: Batch[]) {
        const bytes = batches.reduce((n, b) => n + Buffer.byteLength(JSON.stringify(b.events)), 0);
        if (bytes > 1 << 20)
          throw new RankwatchError(
            'RANKWATCH_ERR_TRANSPORT_REJECTED',
            `message of ${bytes} bytes is over max.message.bytes`,
          );
        await bus.publish(batches);
      },
      stop: async () => {},
    };
    const warnings: string[] = [];
    const c = new Collector({
      publisher: limited,
      logger: { info: () => {}, warn: (m) => warnings.push(m) },
      flushMs: 50,
      maxBatchEvents: 5000,
    });
    const deps = c.deps('n1');
    c.start([]);
    const events: Record<string, unknown>[] = Array.from({ length: 5000 }, (_, i) => ({
      v: 1,
      kind: 'step',
      ts: 1,
      job: 'j',
      rank: i,
      host: 'n1',
      gpu: 0,
      step: 1,
      step_ms: 100,
      compute_ms: 90,
    }));
    events[1234] = { ...events[1234], note: 'x'.repeat(2 << 20) };
    deps.emit(events);
    await until('the batch delivered', () => got.length === 4999);
    await bus.drain();
    expect(new Set((got as { rank: number }[]).map((e) => e.rank)).has(1234)).toBe(false);
    expect(c.counters()).toMatchObject({
      events_sent: 4999,
      events_dropped: 1,
      dropped_by_reason: { refused_by_bus: 1 },
    });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(
      /dropped one event of \d{7} bytes the bus refuses: message of \d+ bytes is over max.message.bytes/,
    );
    await c.stop();
    await bus.stop();
  });
});
