/**
 * The collector's local port on a real socket: it cuts off a client that dribbles its headers (the
 * port takes no token, so slowloris needs nothing) with the same timeouts as `rankwatch up`'s API,
 * and its POST /v1/ingest takes the limits the collector config gives it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SERVER_TIMEOUTS } from '../core/server-timeouts.js';
import { slowClient } from '../tests/slow-client.js';
import { ingestLimitsOf, loadCollectorConfig } from './config.js';
import { startHealthServer } from './health.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-collector-port-'));
const open: { close(): Promise<void> }[] = [];
afterAll(async () => {
  await Promise.all(open.map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
});

const counters = () => ({
  events_read: 0,
  events_sent: 0,
  events_dropped: 0,
  dropped_by_reason: {},
  parse_errors: {},
  ignored_fields: {},
  source_errors: {},
  records_dropped: {},
  publish_errors: 0,
  buffered: 0,
});

const line = (i: number) =>
  JSON.stringify({ v: 1, kind: 'job_event', ts: 1_700_000_000_000 + i, job: 'j', event: 'start' });

describe("the collector's local port", () => {
  it('runs with the timeouts of the API by default', async () => {
    const s = await startHealthServer('127.0.0.1', 0, { counters, ingest: () => {} });
    open.push(s);
    expect(s.server.headersTimeout).toBe(SERVER_TIMEOUTS.headersMs);
    expect(s.server.requestTimeout).toBe(SERVER_TIMEOUTS.requestMs);
    expect(s.server.keepAliveTimeout).toBe(SERVER_TIMEOUTS.keepAliveMs);
    expect(s.server.timeout).toBe(SERVER_TIMEOUTS.idleMs);
  });

  it('closes a connection dribbling its headers, with 408', async () => {
    const s = await startHealthServer('127.0.0.1', 0, {
      counters,
      ingest: () => {},
      timeouts: { headersMs: 500, requestMs: 1500, checkMs: 100 },
    });
    open.push(s);
    const port = Number(new URL(s.url).port);
    const r = await slowClient(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    expect(r.closedByServer).toBe(true);
    expect(r.got).toMatch(/^HTTP\/1\.1 408 /);
    // A prompt client is still answered.
    expect((await fetch(`${s.url}/healthz`)).status).toBe(200);
  });

  it('takes the ingest limits of the collector config', async () => {
    const file = join(dir, 'collector.json');
    writeFileSync(file, JSON.stringify({ health: { port: 0, ingestMaxEvents: 3, ingestMemoryMb: 32 } }));
    const cfg = loadCollectorConfig(file, {}, []);
    expect(cfg.health).toMatchObject({ ingestMaxEvents: 3, ingestMaxMb: 16, ingestMemoryMb: 32 });
    const taken: unknown[] = [];
    const limits = ingestLimitsOf(cfg.health);
    expect(limits.ingestBudget.maxBytes).toBe(32 << 20);
    const s = await startHealthServer('127.0.0.1', 0, {
      counters,
      ingest: (events) => {
        taken.push(...events);
      },
      ...limits,
    });
    open.push(s);
    const post = (n: number) =>
      fetch(`${s.url}/v1/ingest`, {
        method: 'POST',
        body: `${Array.from({ length: n }, (_, i) => line(i)).join('\n')}\n`,
      });
    const over = await post(4);
    expect(over.status).toBe(413);
    expect(((await over.json()) as { message: string }).message).toMatch(/more than 3 events/);
    expect((await post(3)).status).toBe(200);
    expect(taken).toHaveLength(3);
  });

  it('refuses limits that cannot hold together, naming the keys', () => {
    const file = join(dir, 'bad.json');
    writeFileSync(
      file,
      JSON.stringify({ health: { ingestMaxMb: 32, ingestMemoryMb: 16, ingestMaxEvents: 0 } }),
    );
    expect(() => loadCollectorConfig(file, {}, [])).toThrow(
      /health\.ingestMaxEvents: Expected integer to be greater or equal to 1/,
    );
    writeFileSync(file, JSON.stringify({ health: { ingestMaxMb: 32, ingestMemoryMb: 16 } }));
    expect(() => loadCollectorConfig(file, {}, [])).toThrow(
      'health.ingestMemoryMb: 16 is below health.ingestMaxMb 32',
    );
  });
});
