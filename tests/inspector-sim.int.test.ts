/**
 * Issue 26's acceptance, through the built CLI: a simulated 512-rank job with a degraded NIC rail,
 * its collectives only in NCCL Inspector dump files (`rankwatch sim --inspector-dir`), its step
 * events (with their pids) posted to the collector's local port as the Python hook does;
 * `rankwatch collect --nccl-inspector DIR --nccl-inspector-all-hosts` maps and reduces the
 * records and writes its bus to a file; `rankwatch replay` of that file finds the rail on the
 * right host and GPU within 60 s of the fault's onset in event time. Its clean twin opens nothing.
 */
import { execFile, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { InjectedFault } from '../sim/cluster.js';
import { BIN, type Running } from './helpers.js';
import { collectInspector } from './inspector-path.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-inspector-sim-'));
const running: Running[] = [];
afterAll(() => {
  for (const r of running) r.kill();
  rmSync(dir, { recursive: true, force: true });
});

const cli = (args: string[], cwd = dir) =>
  spawnSync(process.execPath, [BIN, ...args], { cwd, encoding: 'utf8', maxBuffer: 256 << 20 });

/** The CLI as a child that does not block this process (two jobs run side by side). */
const cliAsync = (args: string[], cwd = dir) =>
  new Promise<{ status: number; stderr: string }>((resolve) =>
    execFile(process.execPath, [BIN, ...args], { cwd, maxBuffer: 256 << 20 }, (err, _out, stderr) =>
      resolve({ status: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stderr }),
    ),
  );

/** sim → Inspector files + hook events → collect (bus: a file) → replay; returns the findings and what was sent. */
async function throughCollect(name: string, faults: string[]) {
  const work = join(dir, name);
  mkdirSync(work);
  // The smallest job that shows it: 512 ranks (64 hosts; tp 8, pp 4, dp 16), 12 steps of ~1.2 s.
  const sim = await cliAsync(
    [
      'sim',
      '--ranks',
      '512',
      '--steps',
      '12',
      '--seed',
      '7',
      '--start',
      '2026-03-01T00:00:00Z',
      '--no-telemetry',
      ...faults.flatMap((f) => ['--fault', f]),
      '--inspector-dir',
      'dumps',
      '--truth',
      'truth.json',
      '-o',
      'hook.jsonl',
    ],
    work,
  );
  expect(sim.stderr).toBe('');
  expect(sim.status).toBe(0);
  const hook = readFileSync(join(work, 'hook.jsonl'), 'utf8').split('\n').filter(Boolean);
  const files = readdirSync(join(work, 'dumps'));
  const records = files.reduce(
    (n, f) =>
      n +
      readFileSync(join(work, 'dumps', f), 'utf8')
        .split('\n')
        .filter(Boolean).length,
    0,
  );
  expect(files).toHaveLength(512);
  expect(hook.some((l) => l.includes('"kind":"collective"'))).toBe(false);

  const sent = await collectInspector(work, join(work, 'dumps'), hook, running);
  const collectives = sent.filter((e) => e.kind === 'collective');
  expect(collectives).toHaveLength(records);
  for (const e of collectives.slice(0, 50)) expect(e).toMatchObject({ count: 1, seq: expect.any(Number) });

  const replay = await cliAsync([
    'replay',
    join(work, 'bus.jsonl'),
    '--findings',
    join(work, 'findings.jsonl'),
  ]);
  expect(replay.status).toBe(0);
  const findings = readFileSync(join(work, 'findings.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  const truth = JSON.parse(readFileSync(join(work, 'truth.json'), 'utf8')) as InjectedFault[];
  // Offline, the hooks' file and the collector's collectives as two files, merged by event time:
  // the same findings as the bus, whose collectives came seconds after their steps.
  const only = join(work, 'collectives.jsonl');
  writeFileSync(only, `${collectives.map((e) => JSON.stringify(e)).join('\n')}\n`);
  const merged = await cliAsync([
    'replay',
    join(work, 'hook.jsonl'),
    only,
    '--findings',
    join(work, 'merged.jsonl'),
  ]);
  expect(merged.status).toBe(0);
  const brief = (f: { state: string; type: string; host: string; gpu?: number }) =>
    `${f.state} ${f.type} ${f.host}/${f.gpu}`;
  const again = readFileSync(join(work, 'merged.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
  expect(again.map(brief)).toEqual(findings.map(brief));
  return { findings, truth };
}

describe('a simulated job through NCCL Inspector files → rankwatch collect → rankwatch replay', () => {
  it('finds the degraded NIC rail on its host and GPU within 60 s of onset; the clean twin opens nothing', async () => {
    // The two jobs side by side: each waits on its own collector most of the time.
    const [nic, clean] = await Promise.all([
      throughCollect('nic', ['nic:rank=300,at=4,factor=3']),
      throughCollect('clean', []),
    ]);
    const opened = nic.findings.filter((f) => f.state === 'open');
    const fault = nic.truth[0];
    expect(opened.map((f) => `${f.type} ${f.host}/${f.gpu}`)).toEqual([
      `slow_link ${fault.host}/${fault.gpu}`,
    ]);
    expect(opened[0].ts - fault.onsetTs!).toBeGreaterThanOrEqual(0);
    expect(opened[0].ts - fault.onsetTs!).toBeLessThanOrEqual(60_000);
    expect(clean.findings.filter((f) => f.state === 'open')).toEqual([]);
  }, 300_000);

  it('says in one line what is wrong with an Inspector flag or a bus file', () => {
    const ops = cli(['sim', '--ranks', '8', '--steps', '2', '--inspector-ops', '2']);
    expect(ops.status).toBe(2);
    expect(ops.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/RANKWATCH_ERR_USAGE: --inspector-ops needs --inspector-dir DIR/),
    ]);
    const file = join(dir, 'a-file');
    writeFileSync(file, '');
    const notDir = cli(['sim', '--ranks', '8', '--steps', '2', '--inspector-dir', file]);
    expect(notDir.status).toBe(2);
    expect(notDir.stderr).toMatch(/--inspector-dir .*a-file is a file: give a folder/);
    const bus = cli([
      'collect',
      '--bus',
      `file:${join(dir, 'no-such-folder', 'bus.jsonl')}`,
      '--health-port',
      '0',
    ]);
    expect(bus.status).not.toBe(0);
    expect(bus.stderr).toMatch(/RANKWATCH_ERR_PATH: bus file:.*no-such-folder.*cannot be written \(ENOENT\)/);
  });
});
