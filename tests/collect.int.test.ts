/**
 * `rankwatch collect` as a user runs it (the built CLI, a subprocess) against a local HTTP
 * server serving dcgm-exporter text and a Megatron log that grows while it runs; the events
 * must arrive in the embedded pipeline of `rankwatch up` (in this process, 127.0.0.1, a free
 * port) with the right host, gpu, rank and job.
 */
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Up } from '../api/up.js';
import { collectInto, upOnChdb } from './collect-into-up.js';
import { type Running, serveText, until } from './helpers.js';

const root = join(import.meta.dirname, '..');
const fixtures = join(root, 'collectors', 'parsers', 'fixtures');
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-collect-'));
// The fixture's timestamps moved to now, so the stored events are within the raw-event TTL.
const pad = (n: number) => String(n).padStart(2, '0');
const d = new Date();
const stamp = `[${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}]`;
const megatronLines = readFileSync(join(fixtures, 'megatron.log'), 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((l) => l.replace(/\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\]/, stamp));

interface Row {
  kind: string;
  job: string;
  host: string;
  gpu: number;
  rank: number;
  step: number;
}

describe('rankwatch collect → rankwatch up', () => {
  let up: Up;
  let exporter: Awaited<ReturnType<typeof serveText>>;
  let collector: Running;
  const log = join(dir, 'train.log');

  beforeAll(async () => {
    up = await upOnChdb(dir);
    exporter = await serveText('/metrics', readFileSync(join(fixtures, 'dcgm-k8s.prom'), 'utf8'));
    // The first half of the log exists before the collector starts; the rest comes later.
    writeFileSync(log, `${megatronLines.slice(0, 8).join('\n')}\n`);
    collector = collectInto(up, 'gpu-0008', [
      '--dcgm',
      exporter.url,
      '--megatron-log',
      log,
      '--job',
      'llama-13b',
      '--rank',
      '63',
      '--gpu',
      '7',
      '--from',
      'start',
      '--flush-ms',
      '200',
      '--spool',
      join(dir, 'spool'),
    ]);
  });

  afterAll(async () => {
    collector.kill();
    await exporter.close();
    await up?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('delivers gpu events from dcgm-exporter and step/checkpoint events from the growing log', async () => {
    const rows = () =>
      up.store.query<Row>('SELECT kind, job, host, gpu, rank, step FROM events ORDER BY kind, step');
    await until('the first steps', async () =>
      (await rows()).some((r) => r.kind === 'step' && r.step === 1002) ? true : undefined,
    );
    appendFileSync(log, `${megatronLines.slice(8).join('\n')}\n`);
    const all = await until('the appended steps', async () => {
      const r = await rows();
      return r.some((x) => x.kind === 'step' && x.step === 1009) ? r : undefined;
    });

    const steps = all.filter((r) => r.kind === 'step');
    expect([...new Set(steps.map((s) => s.step))].sort()).toEqual([1001, 1002, 1003, 1007, 1009]);
    for (const s of steps) expect(s).toMatchObject({ job: 'llama-13b', host: 'gpu-0008', gpu: 7, rank: 63 });

    const saves = all.filter((r) => r.kind === 'checkpoint');
    expect(saves.map((c) => c.step)).toContain(1003);
    for (const c of saves) expect(c).toMatchObject({ job: 'llama-13b', rank: 63 });

    const gpus = all.filter((r) => r.kind === 'gpu');
    expect(new Set(gpus.map((g) => `${g.host}/${g.gpu}/${g.job}`))).toEqual(
      new Set(['gpu-0017/0/llama-70b', 'gpu-0017/1/llama-70b']),
    );
  }, 180_000);

  it('stops cleanly on SIGTERM, having reported the bad log lines', async () => {
    expect(await collector.stop()).toBe(0);
    expect(collector.stderr()).toMatch(
      /megatron_log: line 13: iteration line in an unknown or truncated form/,
    );
    expect(collector.stderr()).toMatch(/"events_sent":\d+/);
    expect(up.pipeline.counters().dead_letters).toBe(0);
  }, 60_000);
});
