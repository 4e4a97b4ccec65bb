import { type ChildProcess, spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { RankMap } from './ranks.js';

const step = (o: Record<string, unknown>) => ({
  v: 1,
  kind: 'step',
  ts: 1_000_000,
  job: 'llm',
  rank: 0,
  host: 'node-a',
  gpu: 0,
  step: 0,
  step_ms: 1000,
  compute_ms: 800,
  ...o,
});

const children: ChildProcess[] = [];
/** A real process with this environment (and only it), alive until the test ends. */
function processWith(env: Record<string, string>): number {
  const c = spawn('sleep', ['60'], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env },
    stdio: 'ignore',
  });
  children.push(c);
  return c.pid!;
}
afterEach(() => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
});

describe('RankMap', () => {
  it("learns (host, pid) → (job, rank, GPU) and the rank's step ends from the hook's steps", () => {
    const m = new RankMap({ localHosts: ['node-a'] });
    const seen: number[] = [];
    m.onStep((_id, b) => seen.push(b.step));
    m.learn([
      step({ pid: 4242, rank: 5, gpu: 5, step: 7, ts: 2000, step_ms: 900 }),
      step({ pid: 4242, rank: 5, gpu: 5, step: 6, ts: 1000, step_ms: 950 }),
      step({ pid: 4242, rank: 5, gpu: 5, step: 6, ts: 1000, step_ms: 950 }), // a duplicate
      { v: 1, kind: 'gpu', host: 'node-a', gpu: 1, pid: 99 },
    ]);
    expect(m.lookup('node-a', 4242)).toEqual({ job: 'llm', rank: 5, host: 'node-a', gpu: 5, via: 'hook' });
    expect(m.ownerOfGpu('node-a', 5)?.rank).toBe(5);
    expect(m.boundaries('llm', 5)).toEqual([
      { step: 6, endMs: 1000, stepMs: 950 },
      { step: 7, endMs: 2000, stepMs: 900 },
    ]);
    expect(seen).toEqual([7, 6]);
    // Another host's pid 4242 is another process.
    expect(m.lookup('node-b', 4242)).toBeUndefined();
  });

  it("reads a local process's environment: torchrun's RANK and LOCAL_RANK, Slurm's job id", () => {
    const m = new RankMap({ localHosts: ['node-a'] });
    const pid = processWith({
      RANK: '7',
      LOCAL_RANK: '3',
      SLURM_JOB_ID: '81723',
      TORCHELASTIC_RUN_ID: 'none',
    });
    expect(m.lookup('node-a', pid)).toEqual({
      job: '81723',
      rank: 7,
      host: 'node-a',
      gpu: 3,
      via: 'environ',
    });
    // torchrun alone: its run id (not "none") is the job; RANKWATCH_JOB wins over both.
    const tr = processWith({ RANK: '2', TORCHELASTIC_RUN_ID: 'run-5' });
    expect(m.lookup('node-a', tr)).toMatchObject({ job: 'run-5', rank: 2, via: 'environ' });
    const named = processWith({ RANK: '2', SLURM_JOB_ID: '1', RANKWATCH_JOB: 'pretrain-70b' });
    expect(m.lookup('node-a', named)?.job).toBe('pretrain-70b');
    // srun without torchrun: SLURM_PROCID and SLURM_LOCALID.
    const srun = processWith({ SLURM_PROCID: '12', SLURM_LOCALID: '4', SLURM_JOB_ID: '9' });
    expect(m.lookup('node-a', srun)).toMatchObject({ job: '9', rank: 12, gpu: 4 });
  });

  it('says why it cannot map, and never guesses', () => {
    const m = new RankMap({ localHosts: ['node-a'], environRetryMs: 1000 });
    const noRank = processWith({ SLURM_JOB_ID: '5' });
    expect(m.lookup('node-a', noRank, 0)).toBeUndefined();
    expect(m.whyUnmapped('node-a', noRank)).toMatch(/no RANK\/SLURM_PROCID.* in its environment/);
    const noJob = processWith({ RANK: '1' });
    expect(m.lookup('node-a', noJob, 0)).toBeUndefined();
    expect(m.whyUnmapped('node-a', noJob)).toMatch(/no job id/);
    // A process that has exited.
    const gone = spawn('true');
    return new Promise<void>((resolve) =>
      gone.once('exit', () => {
        expect(m.lookup('node-a', gone.pid!, 0)).toBeUndefined();
        expect(m.whyUnmapped('node-a', gone.pid!)).toMatch(/is gone/);
        // Another node's pid: its environment is not here to read.
        expect(m.lookup('node-b', noRank, 0)).toBeUndefined();
        expect(m.whyUnmapped('node-b', noRank)).toMatch(/not this node/);
        resolve();
      }),
    );
  });

  it('asks a pid again after the retry time, and the hook wins over the environment', () => {
    let env = 'SLURM_JOB_ID=5\0';
    const m = new RankMap({ localHosts: ['node-a'], environRetryMs: 1000, readEnviron: () => env });
    expect(m.lookup('node-a', 77, 0)).toBeUndefined();
    env = 'SLURM_JOB_ID=5\0RANK=3\0';
    expect(m.lookup('node-a', 77, 500)).toBeUndefined(); // cached miss
    expect(m.lookup('node-a', 77, 1000)).toMatchObject({ job: '5', rank: 3, via: 'environ' });
    m.learn([step({ pid: 77, rank: 3, job: 'llm' })]);
    expect(m.lookup('node-a', 77)).toMatchObject({ job: 'llm', rank: 3, via: 'hook' });
  });

  it('holds a bounded number of processes and steps', () => {
    const m = new RankMap({ localHosts: ['node-a'], maxProcesses: 100, maxStepsPerRank: 8 });
    for (let p = 1; p <= 1000; p++) m.learn([step({ pid: p, rank: p % 300, gpu: p % 8 })]);
    expect(m.lookup('node-b', 1)).toBeUndefined();
    expect(m.lookup('node-a', 1000)?.rank).toBe(100);
    for (let s = 0; s < 100; s++)
      m.learn([step({ pid: 1000, rank: 100, step: s, ts: 2_000_000 + 1000 * s })]);
    expect(m.boundaries('llm', 100).map((b) => b.step)).toEqual([92, 93, 94, 95, 96, 97, 98, 99]);
  });
});
