/**
 * MFU of hook-style jobs, end to end: events as the Python hook sends them (every rank of a
 * data-parallel replica reports the replica's tokens), replayed into chDB by the built binary,
 * and the stored MFU set against `rankwatch mfu` on the job's global tokens. Layouts with tp, pp,
 * cp and dp all above 1; and the job from issue 9 (tp 8, `parallel` left out as the old hook docs
 * did), whose 8x figure must be marked as one that cannot be true, said once, and never turned
 * into an mfu_drop.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Finding } from '../schema/finding.js';
import { BIN } from './helpers.js';

const exec = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-mfu-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function rankwatch(...args: string[]) {
  try {
    const r = await exec(process.execPath, [BIN, ...args], { maxBuffer: 64 << 20 });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const MODEL = {
  layers: 32,
  hidden: 4096,
  heads: 32,
  kv_heads: 8,
  ffn_hidden: 14336,
  swiglu: true,
  seq_len: 4096,
  vocab: 128256,
};
const modelFile = join(dir, 'model.json');
writeFileSync(modelFile, JSON.stringify(MODEL));

interface Layout {
  tp: number;
  pp: number;
  cp: number;
  dp: number;
}

/** A job as the hook reports it: Megatron rank order (tp fastest, then cp, dp, pp). */
function hookJob(
  job: string,
  l: Layout,
  replicaTokens: number,
  stepMs: (s: number) => number,
  announce?: object,
) {
  const world = l.tp * l.pp * l.cp * l.dp;
  const t0 = Date.now() - 3_600_000;
  const lines: string[] = [
    JSON.stringify({
      v: 1,
      kind: 'job',
      ts: t0,
      job,
      world_size: world,
      gpu_model: 'NVIDIA H100 80GB HBM3',
      dtype: 'bf16',
      parallel: { tp: l.tp, pp: l.pp, dp: l.dp, cp: l.cp },
      model: MODEL,
      hosts: [],
      ...announce,
    }),
  ];
  let ts = t0;
  for (let s = 0; s < 60; s++) {
    const ms = stepMs(s);
    ts += ms;
    for (let r = 0; r < world; r++) {
      const stage = Math.floor(r / (l.tp * l.cp * l.dp));
      lines.push(
        JSON.stringify({
          v: 1,
          kind: 'step',
          ts,
          job,
          rank: r,
          host: `node-${Math.floor(r / 8)}`,
          gpu: r % 8,
          stage,
          step: s,
          step_ms: ms,
          compute_ms: ms * 0.8,
          comm_wait_ms: ms * 0.2,
          tokens: replicaTokens,
          timing: 'wall',
        }),
      );
    }
  }
  return lines;
}

async function cliMfu(tokens: number, stepMs: number, gpus: number, model = modelFile) {
  const r = await rankwatch(
    'mfu',
    '--model',
    model,
    '--tokens-per-step',
    String(tokens),
    '--step-ms',
    String(stepMs),
    '--gpus',
    String(gpus),
    '--gpu-model',
    'H100-SXM',
    '--json',
  );
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as { mfu: number; implausible?: string };
}

/** The real Python hook, one Hook per rank of a tp 2, pp 2, cp 2, dp 2 layout, as its docs say. */
const SMALL = { layers: 2, hidden: 1024, heads: 8, seq_len: 1024, vocab: 32000 };
const smallFile = join(dir, 'small.json');
writeFileSync(smallFile, JSON.stringify(SMALL));
const hookEvents = join(dir, 'hook.jsonl');
const hookReplica = 4 * 10 * 1024;

describe('hook-style jobs replayed into chDB: stored MFU = rankwatch mfu on the global tokens', () => {
  beforeAll(async () => {
    const py = join(import.meta.dirname, '..', 'collectors', 'python', 'tests', 'layout_job.py');
    const r = await exec('python3', [
      py,
      ...['--tp', '2', '--pp', '2', '--cp', '2', '--dp', '2', '--steps', '20'],
      ...['--replica-tokens', String(hookReplica), '--model', smallFile, '--out', hookEvents],
    ]);
    expect(JSON.parse(r.stdout).events).toBe(1 + 16 * 20);
  }, 120_000);

  const layout = { tp: 2, pp: 2, cp: 2, dp: 3 };
  // micro batch 2 x 8 micro batches x 4096 tokens per replica; the job's step is 3 replicas of it.
  const replica = 2 * 8 * 4096;
  const stepMs = (s: number) => 1100 + 10 * (s % 5);
  const tp8 = { tp: 8, pp: 1, cp: 1, dp: 2 };
  const tp8Ms = () => 2050;
  const data = join(dir, 'data');
  const findingsFile = join(dir, 'findings.jsonl');

  it('tp 2, pp 2, cp 2, dp 3; and the tp 8 job announced without its layout', async () => {
    const input = join(dir, 'jobs.jsonl');
    const lines = [
      ...readFileSync(hookEvents, 'utf8').split('\n').filter(Boolean),
      ...hookJob('llama-8b-4d', layout, replica, stepMs),
      // Issue 9: tp 8 following the old hook docs: the job event carried the hook's default layout.
      ...hookJob('llama-8b-tp8', tp8, replica, tp8Ms, { parallel: { tp: 1, pp: 1, dp: 16 } }),
    ];
    writeFileSync(input, `${lines.join('\n')}\n`);
    const r = await rankwatch('replay', input, '--findings', findingsFile, '--data', data, '--quiet');
    expect(r.code, r.stderr).toBe(0);

    const { ChdbStore } = await import('../store/chdb.js');
    const store = new ChdbStore({ path: data });
    let rows: {
      job: string;
      step: number;
      step_ms: number;
      tokens: number;
      mfu: number;
      implausible: string;
    }[];
    try {
      rows = (
        await store.query<{
          job: string;
          step: string;
          step_ms: number;
          tokens: number;
          mfu: number;
          implausible: string;
        }>('SELECT job, step, step_ms, tokens, mfu, implausible FROM mfu FINAL ORDER BY job, step')
      ).map((x) => ({
        ...x,
        step: Number(x.step),
        step_ms: Number(x.step_ms),
        tokens: Number(x.tokens),
        mfu: Number(x.mfu),
      }));
    } finally {
      await store.close();
    }

    const fourD = rows.filter((x) => x.job === 'llama-8b-4d');
    expect(fourD).toHaveLength(60);
    for (const x of fourD) expect(x.tokens).toBe(replica * layout.dp);
    // One CLI run per distinct step time.
    for (const ms of [1100, 1110, 1120, 1130, 1140]) {
      const cli = await cliMfu(replica * layout.dp, ms, 24);
      expect(cli.implausible).toBeUndefined();
      const stored = fourD.filter((x) => x.step_ms === ms);
      expect(stored.length).toBe(12);
      for (const x of stored) expect(x.mfu).toBeCloseTo(cli.mfu, 12);
    }
    expect(fourD[0].mfu).toBeGreaterThan(0.3);
    expect(fourD[0].mfu).toBeLessThan(0.5);

    // The real hook's job: every stored point equals rankwatch mfu on replica tokens x dp 2, at its step time.
    const hook = rows.filter((x) => x.job === 'hook-layout');
    expect(hook).toHaveLength(20);
    for (const x of hook.slice(0, 4)) {
      expect(x.tokens).toBe(hookReplica * 2);
      const cli = await cliMfu(hookReplica * 2, x.step_ms, 16, smallFile);
      expect(x.mfu).toBeCloseTo(cli.mfu, 12);
    }

    // The tp 8 job: 8x its true figure, stored but marked, said once, never a drop.
    const tp8Rows = rows.filter((x) => x.job === 'llama-8b-tp8');
    expect(tp8Rows.every((x) => /cannot be true/.test(x.implausible))).toBe(true);
    expect(fourD.every((x) => x.implausible === '')).toBe(true);
    const truth = await cliMfu(replica * tp8.dp, 2050, 16);
    expect(truth.mfu).toBeGreaterThan(0.15);
    expect(truth.mfu).toBeLessThan(0.3);
    expect(tp8Rows[0].mfu / truth.mfu).toBeCloseTo(8, 6);
    const findings = readFileSync(findingsFile, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Finding);
    const notes = findings.filter((f) => f.type === 'mfu_implausible' && f.state === 'open');
    expect(notes.map((f) => f.job)).toEqual(['llama-8b-tp8']);
    expect(notes[0].summary).toMatch(/cannot be true/);
    expect(notes[0].summary).toMatch(/`parallel` says tp 1, pp 1, cp 1/);
    expect(findings.filter((f) => f.type === 'mfu_drop')).toEqual([]);
  });
});

describe('rankwatch mfu refuses inputs that make no figure, and marks one that cannot be true', () => {
  for (const [flag, value] of [
    ['--step-ms', '0'],
    ['--gpus', '0'],
    ['--gpus', '-8'],
    ['--tokens-per-step', '-1'],
    ['--gpus', '2.5'],
  ]) {
    it(`${flag} ${value} is a usage error, not Infinity%`, async () => {
      const args: Record<string, string> = {
        '--tokens-per-step': '1048576',
        '--step-ms': '1000',
        '--gpus': '8',
      };
      args[flag] = value;
      const r = await rankwatch(
        'mfu',
        '--model',
        modelFile,
        ...Object.entries(args).flat(),
        '--gpu-model',
        'H100-SXM',
      );
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/RANKWATCH_ERR_USAGE/);
      expect(r.stderr.trim().split('\n')[0]).toContain(flag);
      expect(r.stdout).not.toMatch(/Infinity|NaN/);
    });
  }

  it('says why a figure above 100% cannot be true, in the table and in --json', async () => {
    const j = await cliMfu(8 * 1048576, 1000, 8);
    expect(j.mfu).toBeGreaterThan(1);
    expect(j.implausible).toMatch(/cannot be true; likely: --tokens-per-step is too large/);
    const r = await rankwatch(
      'mfu',
      '--model',
      modelFile,
      '--tokens-per-step',
      String(8 * 1048576),
      '--step-ms',
      '1000',
      '--gpus',
      '8',
      '--gpu-model',
      'H100-SXM',
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/% \(cannot be true\)/);
    expect(r.stdout).toMatch(/likely: /);
  });
});
