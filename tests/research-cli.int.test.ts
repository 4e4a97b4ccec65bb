// `rankwatch sim --failures | replay --data` then `checkpoint --job` and `failures` on what was
// stored (chDB, the real engine). Needs dist/: `npm run --silent build` first.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { poissonInterval } from '../analytics/poisson.js';
import { type Running, startRankwatch, until } from './helpers.js';

const run = promisify(execFile);
const bin = join(import.meta.dirname, '..', 'bin', 'rankwatch.js');
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-research-'));
const data = join(dir, 'data');

async function rankwatch(...args: string[]) {
  try {
    const r = await run('node', [bin, ...args], { cwd: dir, maxBuffer: 64 << 20 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

type Ev = Record<string, unknown> & {
  kind: string;
  ts: number;
  job?: string;
  event?: string;
  phase?: string;
};
const events = () =>
  readFileSync(join(dir, 'fleet.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Ev);

// Recent event times: raw events (the job's host list) are kept 30 days by default.
const start = Date.now() - 20 * 86_400_000;

beforeAll(async () => {
  const sim = await rankwatch(
    'sim',
    '--failures',
    '--nodes',
    '64',
    '--days',
    '14',
    '--rate-per-node-day',
    '0.05',
    '--seed',
    '4',
    '--start',
    String(start),
    '--interval-s',
    '1800',
    '--save-s',
    '45',
    '--restart-s',
    '900',
    '--truth',
    join(dir, 'truth.json'),
    '-o',
    join(dir, 'fleet.jsonl'),
  );
  expect(sim.code, sim.stderr).toBe(0);
  // A small job whose every rank reports each save (4 ranks × 3 saves) and which has no failure yet.
  const t = start + 3_600_000;
  const tiny: Ev[] = [
    {
      v: 1,
      kind: 'job',
      ts: t,
      job: 'tiny',
      world_size: 32,
      gpu_model: 'H100-SXM',
      dtype: 'bf16',
      parallel: { tp: 8, pp: 1, dp: 4 },
      flops_per_step: 1e15,
      hosts: ['t0', 't1', 't2', 't3'],
    },
    { v: 1, kind: 'job_event', ts: t, job: 'tiny', event: 'start' },
    ...[1, 2, 3].flatMap((k) =>
      [0, 1, 2, 3].map((rank) => ({
        v: 1,
        kind: 'checkpoint',
        ts: t + k * 600_000 + rank,
        job: 'tiny',
        rank,
        step: k * 100,
        phase: 'save',
        dur_ms: 20_000 + rank * 1000,
        ok: true,
      })),
    ),
  ];
  writeFileSync(join(dir, 'tiny.jsonl'), `${tiny.map((e) => JSON.stringify(e)).join('\n')}\n`);
  const nosave: Ev[] = [
    {
      v: 1,
      kind: 'job',
      ts: t,
      job: 'nosave',
      world_size: 8,
      gpu_model: 'H100-SXM',
      dtype: 'bf16',
      parallel: { tp: 8, pp: 1, dp: 1 },
      flops_per_step: 1e15,
    },
    { v: 1, kind: 'job_event', ts: t, job: 'nosave', event: 'start' },
  ];
  writeFileSync(join(dir, 'nosave.jsonl'), `${nosave.map((e) => JSON.stringify(e)).join('\n')}\n`);
  for (const f of ['fleet.jsonl', 'tiny.jsonl', 'nosave.jsonl']) {
    const r = await rankwatch('replay', join(dir, f), '--data', data);
    expect(r.code, r.stderr).toBe(0);
  }
}, 180_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('rankwatch checkpoint --job on a replayed job', () => {
  it("uses the job's own saves, restarts and failures, and says where each came from", async () => {
    const ev = events();
    const saves = ev.filter((e) => e.kind === 'checkpoint' && e.phase === 'save').length;
    const interrupted = ev.filter((e) => e.kind === 'job_event' && e.event === 'interrupted').length;
    const text = await rankwatch('checkpoint', '--job', 'fleet-0', '--data', data);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toContain(`from mean of the job's ${saves} successful save(s)`);
    expect(text.stdout).toContain(`from the job's own ${interrupted} interruption(s)`);
    expect(text.stdout).toMatch(/restart R +15\.0 min +from mean of the job's \d+ restart\(s\)/);
    expect(text.stdout).toMatch(
      /current τ +30\.0 min +from median of \d+ gap\(s\) between consecutive saves/,
    );

    const r = JSON.parse(
      (await rankwatch('checkpoint', '--job', 'fleet-0', '--data', data, '--json')).stdout,
    );
    expect(r.inputs.saveS.value).toBeCloseTo(45, 6);
    expect(r.inputs.restartS.value).toBeCloseTo(900, 6);
    expect(r.inputs.intervalS.value).toBeCloseTo(1800, 6);
    // MTBF from the job's own record: up time / interruptions, and the true MTBF inside its interval.
    const truth = JSON.parse(readFileSync(join(dir, 'truth.json'), 'utf8'));
    const upH = r.timeline.up_ms / 3_600_000;
    expect(r.inputs.mtbfS.value / 3600).toBeCloseTo(upH / interrupted, 6);
    const ci = poissonInterval(interrupted);
    expect(truth.job_mtbf_h).toBeGreaterThan(upH / ci.hi);
    expect(truth.job_mtbf_h).toBeLessThan(upH / ci.lo);
    // 14 days, less the downtime of each restart (15 min) and the unrestarted tail, if any.
    expect(upH).toBeGreaterThan(14 * 24 - (interrupted * 15) / 60 - 1);
    expect(r.advice.ok).toBe(true);
  });

  it('counts a save reported by every rank once, and says the failure rate comes from the fleet', async () => {
    const r = JSON.parse((await rankwatch('checkpoint', '--job', 'tiny', '--data', data, '--json')).stdout);
    expect(r.timeline.saves).toBe(3);
    // The slowest rank's part: 20 s + 3 × 1 s.
    expect(r.inputs.saveS.value).toBeCloseTo(23, 6);
    expect(r.inputs.mtbfS.source).toMatch(/no interruption of tiny yet: the fleet's \d+ interruption\(s\)/);
  });

  it('says what is missing for a job with no save, without dividing by zero', async () => {
    const r = await rankwatch('checkpoint', '--job', 'nosave', '--data', data);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('No advice yet: missing save time.');
    expect(r.stdout).toContain('no successful save recorded for nosave');
    expect(r.stdout).not.toMatch(/NaN|Infinity/);
  });

  it('refuses an unknown job with one line saying what to check', async () => {
    const r = await rankwatch('checkpoint', '--job', 'nope', '--data', data);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/no job "nope" recorded/);
  });
});

describe('rankwatch failures', () => {
  it('counts every recorded interruption over the exposure the jobs were up, per cause and per host', async () => {
    const ev = events();
    const interrupted = ev.filter((e) => e.kind === 'job_event' && e.event === 'interrupted').length;
    const r = JSON.parse((await rankwatch('failures', '--data', data, '--json', '--gpus', '512')).stdout);
    expect(r.fleet.count).toBe(interrupted);
    expect(r.rows.reduce((s: number, x: { count: number }) => s + x.count, 0)).toBe(interrupted);
    expect(r.mtbf.gpus).toBe(512);
    const byHost = JSON.parse((await rankwatch('failures', '--data', data, '--json', '--by', 'host')).stdout);
    // 64 fleet hosts + 4 of the tiny job, each with exposure from the job's host list.
    expect(byHost.rows.length).toBe(68);
    expect(byHost.rows.every((x: { node_days: number }) => x.node_days > 0)).toBe(true);
    const text = await rankwatch('failures', '--data', data, '--by', 'group');
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/MTBF for a job of 512 GPUs: [\d.]+ h \[95%: [\d.]+ h, [\d.]+ h\]/);
  });

  it('rejects an unknown --by with the choices', async () => {
    const r = await rankwatch('failures', '--data', data, '--by', 'rack');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--by takes cause, group, host, gpu_model/);
  });
});

describe('rankwatch checkpoint from the formula alone', () => {
  it('prints Young, Daly and the sensitivity; refuses missing inputs', async () => {
    const r = await rankwatch(
      'checkpoint',
      '--save-s',
      '60',
      '--mtbf-h',
      '3',
      '--restart-s',
      '600',
      '--json',
    );
    const a = JSON.parse(r.stdout).advice;
    expect(a.dalyS).toBeCloseTo(1098.77, 1);
    expect(a.sensitivity.map((s: { rateFactor: number }) => s.rateFactor)).toEqual([0.5, 2]);
    const bad = await rankwatch('checkpoint', '--save-s', '60');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/give --save-s and --mtbf-h/);
  });
});

describe('replay: the checkpoint_interval finding from the live detectors', () => {
  it('a simulated job saving every 4 h gets one, from its own saves and interruptions', async () => {
    const file = join(dir, 'slow-saves.jsonl');
    const sim = await rankwatch(
      ...['sim', '--failures', '--nodes', '64', '--days', '14', '--rate-per-node-day', '0.05'],
      ...['--seed', '4', '--interval-s', '14400', '--save-s', '45', '--restart-s', '900', '-o', file],
    );
    expect(sim.code, sim.stderr).toBe(0);
    const r = await rankwatch('replay', file, '--quiet');
    expect(r.code, r.stderr).toBe(0);
    const found = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((f) => f.type === 'checkpoint_interval');
    expect(found.filter((f) => f.state === 'open')).toHaveLength(1);
    expect(found[0].evidence).toMatchObject({ current_s: 14400, save_s: 45, restart_s: 900 });
    expect(found[0].est_cost_pct).toBeGreaterThan(5);
    expect(found.at(-1).state).toBe('resolved');
  });

  it('a job with no interruption gets one only with a fleet MTBF (--gpu-mtbf-h)', async () => {
    const plain = await rankwatch('replay', join(dir, 'tiny.jsonl'), '--quiet');
    expect(plain.stdout).not.toContain('checkpoint_interval');
    // 32 GPUs at 3,200 GPU-hours each per failure: M = 100 h, so 23 s saves every ~9.6 min cost.
    const r = await rankwatch('replay', join(dir, 'tiny.jsonl'), '--quiet', '--gpu-mtbf-h', '3200');
    const f = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .find((x) => x.type === 'checkpoint_interval');
    expect(f?.evidence.mtbf_s).toBe(360_000);
    expect(f?.evidence.mtbf_from).toMatch(/configured fleet MTBF of 3200 GPU-hours over its 32 GPUs/);
    const bad = await rankwatch('replay', join(dir, 'tiny.jsonl'), '--gpu-mtbf-h', '0');
    expect(bad.code).toBe(2);
  });
});

describe('checkpoint --job and failures read a running server with --api URL --token T', () => {
  const TOKEN = 'research-token-0123456789';
  let serve: Running;
  let url = '';
  let direct: { failures: Record<string, unknown>; advice: Record<string, unknown> };

  beforeAll(async () => {
    // Read the folder directly first: the server then holds it.
    direct = {
      failures: JSON.parse((await rankwatch('failures', '--data', data, '--json', '--by', 'group')).stdout),
      advice: JSON.parse(
        (await rankwatch('checkpoint', '--job', 'fleet-0', '--data', data, '--json')).stdout,
      ),
    };
    serve = startRankwatch(['serve', '--port', '0', '--data', data, '--token', TOKEN]);
    url = await until('serve listening', () => /listening on (http:\/\/\S+)/.exec(serve.stdout())?.[1]);
  }, 60_000);

  afterAll(async () => {
    await serve?.stop();
    serve?.kill();
  });

  it('gives the same figures over HTTP as from the store', async () => {
    const f = await rankwatch('failures', '--api', url, '--token', TOKEN, '--json', '--by', 'group');
    expect(f.code, f.stderr).toBe(0);
    const viaApi = JSON.parse(f.stdout);
    expect(viaApi.fleet).toEqual(direct.failures.fleet);
    expect(viaApi.rows).toEqual(direct.failures.rows);
    const c = await rankwatch('checkpoint', '--job', 'fleet-0', '--api', url, '--token', TOKEN, '--json');
    expect(c.code, c.stderr).toBe(0);
    const advice = JSON.parse(c.stdout);
    expect(advice.inputs).toEqual(direct.advice.inputs);
    expect(advice.advice).toEqual(direct.advice.advice);
    // An override travels with the request and says it came from the command line.
    const text = await rankwatch(
      'checkpoint',
      '--job',
      'fleet-0',
      '--api',
      url,
      '--token',
      TOKEN,
      '--interval-s',
      '14400',
    );
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toContain(`Job fleet-0 (${new URL(url).origin})`);
    expect(text.stdout).toMatch(/current τ +4\.00 h +from the command line/);
    expect(text.stdout).toMatch(/finding checkpoint_interval: fleet-0 saves every 4 h of compute/);
  });

  it('a missing token, an unknown job and a job with no save each say so', async () => {
    const denied = await rankwatch('failures', '--api', url);
    expect(denied.code).toBe(1);
    expect(denied.stderr).toMatch(/RANKWATCH_ERR_UNAUTHORIZED/);
    const nope = await rankwatch('checkpoint', '--job', 'nope', '--api', url, '--token', TOKEN);
    expect(nope.code).toBe(1);
    expect(nope.stderr).toMatch(/no job "nope" recorded/);
    const nosave = await rankwatch('checkpoint', '--job', 'nosave', '--api', url, '--token', TOKEN);
    expect(nosave.code).toBe(1);
    expect(nosave.stdout).toContain('No advice yet: missing save time.');
  });
});
