/**
 * Public artifacts no one here wrote, through the built CLI as a user runs it: `rankwatch collect`
 * (a subprocess) scrapes a stand-in dcgm-exporter serving dcgm-exporter PR #261's clock-event
 * counts and then PR #239's XID count (no SM clock) scrape after scrape, and tails NVIDIA/nccl
 * #1453's nccl-tests excerpt (rank tags inside the rows, header cut off), into `rankwatch up` (in
 * this process, 127.0.0.1, a free port). What it stored is then replayed with `rankwatch replay`.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Up } from '../api/up.js';
import type { Finding } from '../schema/finding.js';
import { collectInto, upOnChdb } from './collect-into-up.js';
import { BIN, type Running, until } from './helpers.js';

const fixtures = join(import.meta.dirname, '..', 'collectors', 'parsers', 'fixtures');
const fixture = (name: string) => readFileSync(join(fixtures, name), 'utf8');
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-artifacts-'));

type Event = Record<string, unknown> & { kind: string; host: string };

describe('rankwatch collect on public dcgm-exporter and nccl-tests output → up → replay', () => {
  let up: Up;
  let collector: Running;
  let scrapes = 0;
  const server = createServer((_req, res) => {
    // The #261 scrape first, then #239's on every later scrape: the same XID seen again and again.
    const body =
      scrapes++ === 0 ? fixture('dcgm-exp-clock-events.prom') : fixture('dcgm-exp-xid-active.prom');
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(body);
  });

  beforeAll(async () => {
    up = await upOnChdb(dir);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as { port: number }).port;
    copyFileSync(join(fixtures, 'nccl-tests-1453-tagged.txt'), join(dir, 'nccl-tests.log'));
    collector = collectInto(up, 'node-a', [
      '--dcgm',
      `http://127.0.0.1:${port}/metrics`,
      '--nccl-tests',
      join(dir, 'nccl-tests.log'),
      '--from',
      'start',
      '--flush-ms',
      '200',
    ]);
  });

  afterAll(async () => {
    collector.kill();
    await new Promise<void>((r) => server.close(() => r()));
    await up?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const stored = async () =>
    (await up.store.query<{ raw: string }>('SELECT raw FROM events ORDER BY ts')).map(
      (r) => JSON.parse(r.raw) as Event,
    );

  it('a gpu event with the thermal bits, one fault with code 42, a check whose collapse replay judges', async () => {
    await until(
      'the gpu event and the XID fault, and the XID scraped again',
      async () => {
        const ev = await stored();
        return ev.some((e) => e.kind === 'gpu') && ev.some((e) => e.kind === 'fault') && scrapes >= 5
          ? true
          : undefined;
      },
      120_000,
    );
    // The nccl-tests excerpt has no summary: the run is sent, cut off, when the collector stops.
    expect(await collector.stop()).toBe(0);
    const events = await until(
      'the nccl-tests check',
      async () => {
        const ev = await stored();
        return ev.some((e) => e.kind === 'check') ? ev : undefined;
      },
      120_000,
    );

    const gpu = events.find((e) => e.kind === 'gpu');
    expect(gpu).toMatchObject({ host: 'home', gpu: 0, sm_clock_mhz: 1065, clock_event_window_ms: 300_000 });
    // SW thermal 0x20 and HW thermal 0x40, as the window counted them; not "unknown".
    expect((gpu?.throttle_reasons as number) & 0x60).toBe(0x60);
    expect(gpu).not.toHaveProperty('throttle_reasons_unknown');

    // Scraped again and again, the same XID is one fault.
    const faults = events.filter((e) => e.kind === 'fault');
    expect(faults.map((e) => [e.host, e.gpu, e.source, e.code, e.count])).toEqual([
      ['workstation', 0, 'xid', 42, 1],
    ]);

    const checks = events.filter((e) => e.kind === 'check');
    expect(checks).toHaveLength(1);
    expect(checks[0]).toMatchObject({ tool: 'nccl-tests', host: 'node-a', complete: false, busbw_gbs: 29.5 });
    expect(checks[0].rows).toHaveLength(20);
    // Not silent: the two cut pieces of the excerpt are reported with their lines.
    expect(collector.stderr()).toMatch(/nccl_tests: line 7: numbers without the size, count and type/);
    expect(collector.stderr()).not.toMatch(/dcgm_exporter: line/);

    const input = join(dir, 'collected.jsonl');
    const out = join(dir, 'findings.jsonl');
    writeFileSync(input, `${events.map((e) => JSON.stringify(e)).join('\n')}\n`);
    await promisify(execFile)(process.execPath, [BIN, 'replay', input, '--findings', out]);
    const findings: Finding[] = readFileSync(out, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    const collapse = findings.find((f) => f.type === 'nccl_busbw_collapse');
    expect(collapse).toMatchObject({ host: 'node-a', state: 'open' });
    expect(collapse?.evidence).toMatchObject({
      from_bytes: 33554432,
      to_bytes: 67108864,
      from_busbw_gbs: 29.5,
      to_busbw_gbs: 5.27,
    });
    expect(findings.some((f) => f.type === 'xid' && f.evidence.code === 42)).toBe(true);
    expect(up.pipeline.counters().dead_letters).toBe(0);
  }, 300_000);
});
