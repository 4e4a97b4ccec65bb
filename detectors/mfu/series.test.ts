import { describe, expect, it } from 'vitest';
import type { RankwatchEvent } from '../../schema/events.js';
import { DetectorRunner } from '../runner.js';
import { MFU_WAIT_STEPS } from './series.js';

const model = { layers: 16, hidden: 2048, heads: 16, seq_len: 2048, vocab: 32000 };

/** Rank `rank`'s step `s` of a job whose steps take 1 s, one a second. */
function stepEvent(job: string, s: number, rank: number, tokens: number): RankwatchEvent {
  return {
    v: 1,
    kind: 'step',
    ts: 1000 * (s + 1),
    job,
    rank,
    host: 'h',
    gpu: rank,
    step: s,
    step_ms: 1000,
    compute_ms: 900,
    tokens,
  };
}

function run(opts: { missingRank?: number; parallel: object; world: number; replicaTokens: number }) {
  const r = new DetectorRunner();
  const events: RankwatchEvent[] = [
    {
      v: 1,
      kind: 'job',
      ts: 0,
      job: 'j',
      world_size: opts.world,
      gpu_model: 'H100-SXM',
      dtype: 'bf16',
      parallel: opts.parallel as never,
      model,
    },
  ];
  for (let s = 0; s < 40; s++)
    for (let rank = 0; rank < opts.world; rank++) {
      if (rank === opts.missingRank) continue;
      events.push(stepEvent('j', s, rank, opts.replicaTokens));
    }
  for (const e of events) r.push(e);
  r.flush();
  return r.take();
}

describe('MFU series: tokens per step from the ranks', () => {
  it('divides the ranks’ sum by tp·pp·cp: the job’s tokens are the replica’s × dp', () => {
    const out = run({ parallel: { tp: 2, pp: 2, cp: 2, dp: 1 }, world: 8, replicaTokens: 65536 });
    expect(out.mfu.length).toBe(40);
    for (const p of out.mfu) expect(p.tokens).toBe(65536);
  });

  it('scales a frame that closed without a rank, so a late rank is no MFU dip', () => {
    const out = run({ parallel: { tp: 2, pp: 1, dp: 4 }, world: 8, replicaTokens: 4096, missingRank: 5 });
    expect(out.mfu.length).toBe(40);
    for (const p of out.mfu) expect(p.tokens).toBeCloseTo(4096 * 4, 6);
  });
});

describe('a job event that comes after the first steps', () => {
  const step = (s: number, rank: number) => stepEvent('late', s, rank, 8192);
  const jobEvent = (ts: number): RankwatchEvent => ({
    v: 1,
    kind: 'job',
    ts,
    job: 'late',
    world_size: 2,
    gpu_model: 'H100-SXM',
    dtype: 'bf16',
    parallel: { tp: 1, pp: 1, dp: 2 },
    model,
  });
  /** `before` steps of both ranks, then the job event (unless left out), then steps up to `steps`. */
  function late(before: number, steps = 100, announce = true) {
    const r = new DetectorRunner();
    for (let s = 0; s < before; s++) for (let rank = 0; rank < 2; rank++) r.push(step(s, rank));
    if (announce) r.push(jobEvent(1000 * (before + 1)));
    for (let s = before; s < steps; s++) for (let rank = 0; rank < 2; rank++) r.push(step(s, rank));
    r.flush();
    const out = r.take();
    return { out, notes: out.findings.filter((f) => f.type === 'mfu_unavailable') };
  }

  it('a few steps late (rank 0 sent it after other ranks had sent steps): every step gets its MFU, nothing said', () => {
    // Seen in CI under load: the hook job's job event came after 10 steps of another rank, whose
    // frames had closed (8 open at most), and 2 of its 20 MFU points were never made.
    const { out, notes } = late(20);
    expect(notes).toEqual([]);
    expect(out.mfu.map((p) => p.step)).toEqual(Array.from({ length: 100 }, (_, s) => s));
    expect(out.mfu.every((p) => p.tokens === 16384)).toBe(true);
  });

  it(`overdue (more than ${MFU_WAIT_STEPS} closed steps): says there is no MFU, ends that when it comes, and MFU follows`, () => {
    const { out, notes } = late(80);
    expect(notes.map((f) => f.state)).toEqual(['open', 'resolved']);
    expect(notes[0].summary).toMatch(/no `job` event/);
    // 80 steps before it, 8 of them still open: 72 closed, of which the latest 64 were held.
    expect(out.mfu.map((p) => p.step)).toEqual(Array.from({ length: 92 }, (_, i) => i + 8));
    expect(out.mfu.every((p) => p.tokens === 16384)).toBe(true);
  });

  it('never: the job without a job event is told at the end of the input', () => {
    const { out, notes } = late(30, 30, false);
    expect(out.mfu).toEqual([]);
    expect(notes.map((f) => f.state)).toEqual(['open']);
    expect(notes[0].summary).toMatch(/no `job` event/);
  });
});
