import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { buildApp } from '../api/app.js';
import { HttpPublisher } from '../stream/http.js';
import { MemoryTransport } from '../stream/memory.js';
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

async function ingest(port = 0) {
  const bus = new MemoryTransport();
  const events: unknown[] = [];
  await bus.consume(async (d) => {
    events.push(...d.events);
  });
  const app = await buildApp({ publisher: bus });
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
    expect(res.status).toBe(400);
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
});
