/** The command line as a user runs it: the built binary, real files, real chDB. */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Finding } from '../schema/finding.js';
import { expectBuiltPipeline } from './helpers.js';

const run = promisify(execFile);
const bin = join(import.meta.dirname, '..', 'bin', 'rankwatch.js');
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-cli-'));

async function rankwatch(...args: string[]) {
  return rankwatchWith({}, ...args);
}

async function rankwatchWith(env: Record<string, string>, ...args: string[]) {
  try {
    const r = await run(process.execPath, [bin, ...args], {
      maxBuffer: 64 << 20,
      env: { ...process.env, ...env },
    });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const readFindings = (path: string): Finding[] =>
  readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('rankwatch sim | replay on a 256-rank, 240-step job', () => {
  const faulty = join(dir, 'throttle.jsonl');
  const clean = join(dir, 'clean.jsonl');
  const truth = join(dir, 'truth.json');

  beforeAll(async () => {
    const a = await rankwatch(
      'sim',
      '--ranks',
      '256',
      '--steps',
      '240',
      '--seed',
      '5',
      '--fault',
      'throttle:rank=37,at=60',
      '--truth',
      truth,
      '-o',
      faulty,
    );
    const b = await rankwatch('sim', '--ranks', '256', '--steps', '240', '--seed', '5', '-o', clean);
    expect(a.code).toBe(0);
    expect(b.code).toBe(0);
  });

  it('names the throttled rank (host and gpu) after onset', async () => {
    const out = join(dir, 'f1.jsonl');
    const r = await rankwatch('replay', faulty, '--findings', out);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/replayed \d+ events/);
    expectBuiltPipeline(
      r.stderr,
      `file ${faulty}`,
      /^none · findings: file .*f1\.jsonl · dead letters: stderr summary$/,
    );
    const [injected] = JSON.parse(readFileSync(truth, 'utf8'));
    expect(injected).toMatchObject({ host: 'gpu-0004', gpu: 5, rank: 37 });
    const hits = readFindings(out).filter(
      (f) =>
        f.state === 'open' &&
        ['throttle', 'straggler'].includes(f.type) &&
        f.host === 'gpu-0004' &&
        f.gpu === 5,
    );
    expect(hits.length).toBeGreaterThan(0);
    for (const h of hits) expect(h.ts).toBeGreaterThanOrEqual(injected.onsetTs);
  });

  it('resolves the findings of a recorded job that never said finished, with the reason, at end of input', async () => {
    const cut = join(dir, 'unfinished.jsonl');
    const lines = readFileSync(faulty, 'utf8').split('\n');
    const kept = lines.filter((l) => !l.includes('"finished"'));
    expect(kept.length).toBe(lines.length - 1);
    writeFileSync(cut, kept.join('\n'));
    const out = join(dir, 'f-unfinished.jsonl');
    expect((await rankwatch('replay', cut, '--findings', out)).code).toBe(0);
    const fs = readFindings(out);
    const lastStep = Math.max(
      ...kept.filter((l) => l.includes('"kind":"step"')).map((l) => JSON.parse(l).ts),
    );
    const quiet = fs.filter((f) => f.state === 'resolved' && f.evidence.resolved_reason === 'job_quiet');
    expect(quiet.map((f) => [f.type, f.host, f.gpu])).toEqual([['straggler', 'gpu-0004', 5]]);
    expect(quiet[0].ts).toBeGreaterThan(lastStep);
    expect(quiet[0].resolution).toMatch(/went quiet at \d{4}-\d\d-\d\dT/);
    // The throttle belongs to the GPU, not the job: it stays open.
    const throttle = fs.filter((f) => f.type === 'throttle' && f.host === 'gpu-0004');
    expect(throttle.at(-1)?.state).not.toBe('resolved');
  });

  it('reports no straggler or throttle on the same job without the fault', async () => {
    const out = join(dir, 'f2.jsonl');
    expect((await rankwatch('replay', clean, '--findings', out)).code).toBe(0);
    expect(readFindings(out).filter((f) => ['throttle', 'straggler'].includes(f.type))).toEqual([]);
  });

  it('gives the same findings every time', async () => {
    const a = join(dir, 'a.jsonl');
    const b = join(dir, 'b.jsonl');
    await rankwatch('replay', faulty, '--findings', a);
    await rankwatch('replay', faulty, '--findings', b);
    expect(readFileSync(a, 'utf8')).toBe(readFileSync(b, 'utf8'));
    expect(readFileSync(a, 'utf8').length).toBeGreaterThan(0);
  });

  it('sets malformed lines aside with line numbers and still processes the good events around them', async () => {
    const lines = readFileSync(faulty, 'utf8').split('\n');
    const bad = [
      '{"v":1,"kind":"step","ts":', // truncated
      '{"v":1,"kind":"weather","ts":1}', // unknown kind
      '{"v":1,"kind":"step","ts":1,"job":"x"}', // missing fields
      '{"v":1,"kind":"gpu","ts":1,"host":"h","gpu":"zero","sm_clock_mhz":1,"throttle_reasons":0}', // wrong type
      'garbage',
      '[]',
    ];
    const at = [10, 5000, 90000, 150000, 200000, 250000];
    for (const [i, n] of at.entries()) lines.splice(n - 1, 0, bad[i]);
    const mixed = join(dir, 'mixed.jsonl');
    writeFileSync(mixed, lines.join('\n'));
    const out = join(dir, 'f3.jsonl');
    const dead = join(dir, 'dead.jsonl');
    const r = await rankwatch('replay', mixed, '--findings', out, '--dead-letter', dead);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/6 malformed lines set aside; first 5:/);
    expect(r.stderr).toMatch(/line 10: not valid JSON/);
    expect(r.stderr).toMatch(/line 5000: unknown kind "weather"/);
    expect(r.stderr).toMatch(/line 90000: step: missing field: rank/);
    expect(r.stderr).toMatch(/line 150000: gpu\.gpu: .*"zero"/);
    expect(readFileSync(dead, 'utf8').trim().split('\n')).toHaveLength(6);
    const found = readFindings(out).filter((f) => f.state === 'open' && f.host === 'gpu-0004' && f.gpu === 5);
    expect(found.length).toBeGreaterThan(0);
  });

  it('stores events and findings when given a chDB folder', async () => {
    const data = join(dir, 'replay-data');
    const small = join(dir, 'small.jsonl');
    const sim = await rankwatch(
      'sim',
      '--ranks',
      '16',
      '--steps',
      '60',
      '--start',
      String(Date.now() - 60_000),
      '--fault',
      'slow_rank:rank=3,at=10,slowdown=0.4',
      '-o',
      small,
    );
    expect(sim.code).toBe(0);
    const out = join(dir, 'f-small.jsonl');
    const stored = await rankwatch('replay', small, '--findings', out, '--data', data);
    expect(stored.code).toBe(0);
    expectBuiltPipeline(
      stored.stderr,
      `file ${small}`,
      /^chDB at .* · findings: file .*f-small\.jsonl · dead letters: stderr summary$/,
    );
    const { ChdbStore } = await import('../store/chdb.js');
    const { findingsOf, tableCounts } = await import('../store/queries.js');
    const store = new ChdbStore({ path: data });
    try {
      const lines = readFileSync(small, 'utf8').trim().split('\n').length;
      expect((await tableCounts(store)).events).toBe(lines);
      expect((await findingsOf(store)).map((f) => f.id).sort()).toEqual(
        readFindings(out)
          .map((f) => f.id)
          .sort(),
      );
    } finally {
      await store.close();
    }
  });

  it('stores events piped in on stdin into a chDB folder (the engine never sees the pipe)', async () => {
    const data = join(dir, 'piped-data');
    const small = join(dir, 'small-piped.jsonl');
    const sim = await rankwatch(
      'sim',
      '--ranks',
      '8',
      '--steps',
      '20',
      '--start',
      String(Date.now() - 60_000),
      '-o',
      small,
    );
    expect(sim.code).toBe(0);
    // A real pipe into the replay process, as `rankwatch sim | rankwatch replay - --data DIR` makes.
    const r = await run('bash', [
      '-c',
      `cat '${small}' | '${process.execPath}' '${bin}' replay - --data '${data}' --findings /dev/null`,
    ]);
    expect(r.stderr).toMatch(/replayed \d+ events/);
    const { ChdbStore } = await import('../store/chdb.js');
    const { tableCounts } = await import('../store/queries.js');
    const store = new ChdbStore({ path: data });
    try {
      expect((await tableCounts(store)).events).toBe(readFileSync(small, 'utf8').trim().split('\n').length);
    } finally {
      await store.close();
    }
  });

  it('explains a missing input file', async () => {
    const r = await rankwatch('replay', join(dir, 'nope.jsonl'));
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/RANKWATCH_ERR_PATH: no such file or folder: .*nope\.jsonl, the input FILE/);
  });
});

describe('rankwatch mfu', () => {
  it('reproduces PaLM 540B at 46.2% from the command line', async () => {
    const model = join(dir, 'palm.json');
    writeFileSync(
      model,
      JSON.stringify({
        params: 540e9,
        layers: 118,
        hidden: 18432,
        heads: 48,
        head_dim: 256,
        seq_len: 2048,
        vocab: 256000,
      }),
    );
    const r = await rankwatch(
      'mfu',
      '--model',
      model,
      '--tokens-per-step',
      '238300',
      '--step-ms',
      '1000',
      '--gpus',
      '6144',
      '--gpu-model',
      'TPU-v4',
      '--json',
    );
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(Math.abs(j.mfu - 0.462) / 0.462).toBeLessThan(0.01);
    expect(j.convention).toBe('palm');
    expect(j.flops_per_token).toBeGreaterThan(3e12);
    expect(j.tflops_per_gpu).toBeCloseTo(127, 0);
  });

  it('says what is missing', async () => {
    const model = join(dir, 'palm.json');
    const r = await rankwatch(
      'mfu',
      '--model',
      model,
      '--tokens-per-step',
      '1',
      '--step-ms',
      '1',
      '--gpus',
      '1',
    );
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--gpu-model NAME or --peak-tflops P/);
    const bad = join(dir, 'bad.json');
    writeFileSync(bad, JSON.stringify({ layers: 'many' }));
    const r2 = await rankwatch(
      'mfu',
      '--model',
      bad,
      '--tokens-per-step',
      '1',
      '--step-ms',
      '1',
      '--gpus',
      '1',
      '--peak-tflops',
      '1',
    );
    expect(r2.code).toBe(2);
    expect(r2.stderr).toMatch(/RANKWATCH_ERR_MODEL/);
  });
});

describe('help and errors', () => {
  it.each(['demo', 'replay', 'sim', 'mfu'])('%s --help', async (cmd) => {
    const r = await rankwatch(cmd, '--help');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`rankwatch ${cmd}`));
  });

  it('eval --update-docs checks the file and its markers before evaluating anything', async () => {
    const doc = join(dir, 'no-markers.md');
    writeFileSync(doc, '# results\n');
    const started = Date.now();
    const r = await rankwatch('eval', '--update-docs', doc);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/RANKWATCH_ERR_INPUT: the document has no <!-- eval:start -->/);
    expect(Date.now() - started).toBeLessThan(30_000); // the full matrix takes minutes
    expect(readFileSync(doc, 'utf8')).toBe('# results\n');
    const missing = await rankwatch('eval', '--sweep', '--update-docs', join(dir, 'nope.md'));
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/RANKWATCH_ERR_PATH: no such file or folder: .*nope\.md, --update-docs/);
  });

  it('detect refuses a replay window that is not a positive number of minutes, before connecting', async () => {
    const r = await rankwatch('detect', '--replay-max-age', '0', '--brokers', '127.0.0.1:1');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/RANKWATCH_ERR_USAGE: --replay-max-age needs a number of minutes above 0/);
  });

  it('refuses a heap growth setting that is not a whole percent, in one line, before running', async () => {
    const r = await rankwatchWith(
      { RANKWATCH_HEAP_GROWING_PERCENT: '1.5x' },
      'sim',
      '--ranks',
      '8',
      '--steps',
      '2',
    );
    expect(r.code).not.toBe(0);
    expect(r.stdout).toBe(''); // the job never ran
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(
      /RANKWATCH_ERR_USAGE: RANKWATCH_HEAP_GROWING_PERCENT needs a number, got "1\.5x"/,
    );
    const ok = await rankwatchWith(
      { RANKWATCH_HEAP_GROWING_PERCENT: '0' },
      'sim',
      '--ranks',
      '8',
      '--steps',
      '2',
    );
    expect(ok.code).toBe(0);
  });

  it('rejects unknown commands and flags', async () => {
    const unknown = await rankwatch('frobnicate');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command "frobnicate"/);
    const r = await rankwatch('sim', '--rank', '3');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/RANKWATCH_ERR_USAGE: .*--rank/);
  });
});

describe('rankwatch demo', () => {
  it('runs a job through the embedded pipeline into chDB and summarises', async () => {
    const data = join(dir, 'data');
    const r = await rankwatch(
      'demo',
      '--ranks',
      '64',
      '--steps',
      '120',
      '--speed',
      '0',
      '--data',
      data,
      '--fault',
      'throttle:rank=9,at=30',
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/FOUND +throttle gpu-0001\/1 rank 9/);
    expectBuiltPipeline(r.stdout, 'memory', /^chDB at .* · findings: summary, console$/);
    expect(r.stdout).toMatch(/Injected faults/);
    expect(r.stdout).toMatch(/Job MFU: \d+\.\d%/);
    expect(r.stdout).toMatch(/stored: events [1-9][\d,]*, steps 7,680/);
    expect(r.stdout).toMatch(/False findings: 0/);
  });
});
