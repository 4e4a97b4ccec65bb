/**
 * Issue 27's attack on `rankwatch up`: one 9.9 MB gzip body of 3.5 M tiny valid events (it
 * inflates to 255 MB, under the old 256 MiB cap) took the process to 4 GB of RSS and stalled its
 * event loop, /healthz included, for 10 s; two at once to 8 GB. The built CLI in a child process
 * now refuses such a body whole (413) as soon as it passes the events one request may send, with
 * its peak RSS (VmHWM of /proc/PID/status) under 1 GB, two at once far from twice one, and takes
 * bodies at the limit; /healthz answers within 1 s throughout, polled every 50 ms while the bodies
 * are read and answered.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { createGzip, gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { type Running, refusedForEvents, startRankwatch, until } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-up-ingest-memory-'));
const running: Running[] = [];
afterAll(() => {
  for (const r of running) r.kill();
  rmSync(dir, { recursive: true, force: true });
});

/** `n` tiny valid events (job lifecycle lines of 8 jobs, 73 bytes each), gzipped as a stream. */
async function tinyEventsGzip(n: number): Promise<Buffer> {
  function* text() {
    for (let i = 0; i < n; i += 10_000) {
      let s = '';
      for (let j = i; j < Math.min(n, i + 10_000); j++)
        s += `{"v":1,"kind":"job_event","ts":${1_764_480_000_000 + j},"job":"j${j % 8}","event":"start"}\n`;
      yield s;
    }
  }
  const out: Buffer[] = [];
  for await (const chunk of Readable.from(text()).pipe(createGzip({ level: 9 }))) out.push(chunk as Buffer);
  return Buffer.concat(out);
}

const MiB = 1 << 20;
const peakRss = (pid: number) =>
  Number(/^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

describe('rankwatch up under the 3.5 M-event body', () => {
  it('refuses it whole with a bounded peak RSS, takes bodies at the limit, and /healthz answers throughout', async () => {
    const attack = await tinyEventsGzip(3_500_000);
    expect(attack.length).toBeGreaterThan(9 * MiB);
    expect(attack.length).toBeLessThan(11 * MiB);
    const atLimit = await tinyEventsGzip(50_000);

    const up = startRankwatch(['up', '--port', '0', '--data', join(dir, 'data'), '--rebuild-minutes', '0']);
    running.push(up);
    const url = await until('the listening line', () => /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1]);
    const pid = up.proc.pid!;
    // The first requests compile routes and open connections: not what the bound is about.
    for (let i = 0; i < 3; i++) expect((await fetch(`${url}/healthz`)).status).toBe(200);

    const latencies: number[] = [];
    let polling = true;
    const poll = (async () => {
      while (polling) {
        const t = performance.now();
        const r = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(30_000) });
        await r.arrayBuffer();
        latencies.push(performance.now() - t);
        expect(r.status).toBe(200);
        await sleep(50);
      }
    })();
    const post = async (body: Buffer) => {
      const r = await fetch(`${url}/v1/ingest`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-ndjson', 'content-encoding': 'gzip' },
        body: new Uint8Array(body),
      });
      return { status: r.status, retryAfter: r.headers.get('retry-after'), body: await r.json() };
    };

    const refused = { status: 413, retryAfter: null, body: refusedForEvents(50_000) };
    expect(await post(attack)).toEqual(refused);
    const peakOne = peakRss(pid);
    expect(await Promise.all([post(attack), post(attack)])).toEqual([refused, refused]);
    const peakTwo = peakRss(pid);

    // At the limit: taken, and carried through the detectors into the store.
    const taken = { status: 200, retryAfter: null, body: { accepted: 50_000, rejected: 0 } };
    expect(await post(atLimit)).toEqual(taken);
    expect(await Promise.all([post(atLimit), post(atLimit)])).toEqual([taken, taken]);
    // The bound is for while bodies are read and answered; storing them is the pipeline's work.
    polling = false;
    await poll;
    const counter = async (name: string) =>
      Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(await (await fetch(`${url}/metrics`)).text())?.[1]);
    await until(
      'the taken events processed',
      async () => ((await counter('rankwatch_pipeline_events_total')) >= 150_000 ? true : undefined),
      120_000,
    );
    const peakTaken = peakRss(pid);

    const worst = Math.max(...latencies);
    console.log(
      `peak RSS: ${(peakOne / MiB).toFixed(0)} MiB after one 3.5 M-event body, ${(peakTwo / MiB).toFixed(0)} after two at once, ${(peakTaken / MiB).toFixed(0)} after 150,000 events taken; /healthz: ${latencies.length} polls, worst ${worst.toFixed(0)} ms`,
    );
    expect(peakOne).toBeLessThan(1024 * MiB);
    expect(peakTwo).toBeLessThan(1.5 * peakOne);
    expect(peakTaken).toBeLessThan(1024 * MiB);
    expect(latencies.length).toBeGreaterThan(10);
    expect(worst).toBeLessThan(1000);
    expect(await counter('rankwatch_bus_published_events_total')).toBe(150_000);
    expect(await counter('rankwatch_ingest_refused_too_large_total')).toBe(3);
    expect(await counter('rankwatch_ingest_in_flight_bytes')).toBe(0);
    expect(await up.stop('SIGTERM')).toBe(0);
  }, 300_000);

  it('takes its limits from the flags, and refuses a memory bound below the per-request one', async () => {
    const bad = startRankwatch([
      'up',
      '--port',
      '0',
      '--data',
      join(dir, 'bad'),
      '--ingest-max-mb',
      '4',
      '--ingest-memory-mb',
      '2',
    ]);
    running.push(bad);
    expect(await new Promise((r) => bad.proc.once('exit', r))).toBe(2);
    expect(bad.stderr()).toMatch(
      /RANKWATCH_ERR_USAGE: --ingest-memory-mb \(RANKWATCH_INGEST_MEMORY_MB\) 2 is below --ingest-max-mb \(RANKWATCH_INGEST_MAX_MB\) 4: a request that large could never be taken/,
    );

    const up = startRankwatch([
      'up',
      '--port',
      '0',
      '--data',
      join(dir, 'flags'),
      '--rebuild-minutes',
      '0',
      '--ingest-max-events',
      '500',
      '--ingest-max-mb',
      '0.0625',
      '--ingest-memory-mb',
      '0.0625',
    ]);
    running.push(up);
    const url = await until('the listening line', () => /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1]);
    const post = async (body: Buffer) => {
      const r = await fetch(`${url}/v1/ingest`, { method: 'POST', body: new Uint8Array(body) });
      return { status: r.status, message: ((await r.json()) as { message?: string }).message };
    };
    expect(await post(await tinyEventsGzip(501))).toEqual({
      status: 413,
      message: expect.stringMatching(/^body holds more than 500 events/),
    });
    // One event of 70 KB: past 0.0625 MiB (64 KiB) of JSON lines.
    const long = { v: 1, kind: 'fault', ts: 1, host: 'h', source: 'xid', message: 'x'.repeat(70_000) };
    expect(await post(gzipSync(JSON.stringify(long)))).toEqual({
      status: 413,
      message: expect.stringMatching(/^gzip body inflates past 65536 bytes/),
    });
    expect(await post(await tinyEventsGzip(500))).toEqual({ status: 200, message: undefined });
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/^rankwatch_ingest_in_flight_limit_bytes 65536$/m);
    expect(metrics).toMatch(/^rankwatch_ingest_refused_too_large_total 2$/m);
    expect(await up.stop('SIGTERM')).toBe(0);
  }, 120_000);
});
