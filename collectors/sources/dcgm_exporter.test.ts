import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MemoryTransport } from '../../stream/memory.js';
import { Collector } from '../collector.js';
import { renderMetrics } from '../health.js';
import { dcgmExporter } from './dcgm_exporter.js';

const fixture = (name: string) =>
  readFileSync(join(import.meta.dirname, '../parsers/fixtures', name), 'utf8');
const quiet = { info: () => {}, warn: () => {} };
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (closers.length) await closers.pop()?.();
});

/** A real HTTP server on loopback that answers each scrape with the next body (the last one repeats). */
async function exporter(bodies: string[]): Promise<string> {
  let i = 0;
  const server = createServer((_req, res) => {
    const body = bodies[Math.min(i++, bodies.length - 1)];
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  closers.push(() => new Promise<void>((r) => server.close(() => r())));
  return `http://127.0.0.1:${(server.address() as { port: number }).port}/metrics`;
}

/** Runs the source against `bodies` until it has scraped `scrapes` times (a gpu event or a problem each). */
async function scrape(bodies: string[], scrapes: number) {
  const url = await exporter(bodies);
  const c = new Collector({ publisher: new MemoryTransport(), logger: quiet, flushMs: 20 });
  const deps = c.deps('node-1');
  const events: { kind: string; [k: string]: unknown }[] = [];
  const src = dcgmExporter.create(
    { type: 'dcgm_exporter', url, intervalMs: 100, timeoutMs: 2000 },
    {
      ...deps,
      emit: (e) => {
        events.push(...(e as typeof events));
        deps.emit(e);
      },
    },
  );
  const seen = () =>
    events.filter((e) => e.kind === 'gpu').length + (c.counters().parse_errors.dcgm_exporter ?? 0);
  src.start();
  const end = Date.now() + 10_000;
  while (seen() < scrapes && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  await src.stop();
  await c.stop();
  return { events, counters: c.counters() };
}

describe('dcgm_exporter source over HTTP', () => {
  it('counts unknown DCGM fields as ignored on /metrics, parse errors stay zero, a count rise is one fault', async () => {
    const { events, counters } = await scrape(
      [fixture('dcgm-exp-counts-before.prom'), fixture('dcgm-exp-counts-after.prom')],
      3,
    );
    expect(counters.parse_errors).toEqual({});
    expect(counters.ignored_fields.dcgm_exporter.DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION).toBeGreaterThanOrEqual(
      3,
    );
    expect(renderMetrics(counters)).toMatch(
      /rankwatch_collector_ignored_fields_total\{source="dcgm_exporter",field="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"\} \d+/,
    );
    expect(events.filter((e) => e.kind === 'fault').map((e) => e.code)).toEqual([42]);
  });

  it('refuses a body cut mid-number: one parse problem per scrape, no 1 MHz reading', async () => {
    const text = fixture('dcgm-readme.prom');
    const { events, counters } = await scrape([text.slice(0, text.indexOf('} 139') + 3)], 2);
    expect(events).toEqual([]);
    expect(counters.parse_errors.dcgm_exporter).toBeGreaterThanOrEqual(2);
  });
});
