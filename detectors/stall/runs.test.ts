import { describe, expect, it } from 'vitest';
import { type StallHit, StallRun } from './runs.js';
import { STALL_DEFAULTS } from './stall.js';

const cfg = STALL_DEFAULTS;

/** A stall at `frame`: 4 s long, saving 4 s, on a job whose steps take 1.2 s. */
const hit = (frame: number, excused = false): StallHit => ({
  frame,
  step: frame,
  ts: frame * 1200,
  stallMs: 4000,
  savedMs: 4000,
  wallMs: frame * 1200 + 4000 * Math.floor(frame / 50),
  inCompute: true,
  excused,
});

/** Feeds hits at these frames to a new run; returns it. */
function runOf(frames: number[], flagAt = Number.POSITIVE_INFINITY): StallRun {
  const run = new StallRun(hit(frames[0]));
  for (const f of frames.slice(1)) {
    run.add(hit(f), cfg);
    if (run.hits >= flagAt) run.flagged = true;
  }
  return run;
}

describe('recurring stall runs: stalls spaced by a steady period', () => {
  it('counts stalls whose gaps stay within a quarter of the period so far (45-55 steps apart)', () => {
    const run = runOf([10, 55, 110, 156, 210]);
    expect(run.hits).toBe(5);
    expect(run.period()).toBe(50);
  });

  it('ignores a spike between two stalls: the run goes on at its period', () => {
    const run = runOf([10, 60, 85, 110, 160]);
    expect(run.hits).toBe(4);
    expect(run.period()).toBe(50);
  });

  it('starts again from its last two stalls when a gap is too long, never counting the broken ones', () => {
    // 110 -> 190 breaks the 50-step period: 110 and 190 start another, with a period of 80...
    const run = runOf([10, 60, 110, 190, 240]);
    expect(run.hits).toBe(2);
    expect(run.first.frame).toBe(110);
    // ...which 240 is too early for, and 270 continues.
    expect(runOf([10, 60, 110, 190, 270]).hits).toBe(3);
  });

  it('takes no gap below minGap or above maxGap as a period', () => {
    const burst = runOf([10, 15, 20, 25, 30]);
    expect([burst.hits, burst.periods]).toEqual([1, 0]);
    const far = runOf([0, cfg.maxGap + 1, 2 * cfg.maxGap + 2, 3 * cfg.maxGap + 3, 4 * cfg.maxGap + 4]);
    expect(far.hits).toBe(1);
  });

  it('lets a stall explained by a checkpoint carry the period without counting it, or starting a run', () => {
    const run = new StallRun(hit(10));
    run.add(hit(60), cfg);
    expect(run.add(hit(110, true), cfg)).toBe(false);
    run.add(hit(160), cfg);
    expect(run.hits).toBe(3);
    expect(run.period()).toBe(50);
    const fresh = new StallRun(hit(10, true));
    expect(fresh.hits).toBe(0);
    expect(fresh.add(hit(60, true), cfg)).toBe(false);
    expect(fresh.periods).toBe(0);
  });

  it('once flagged, a skipped stall or two keep the run (one gap of two periods), and off-period hits are noise', () => {
    const run = runOf([10, 60, 110, 160, 210], 5);
    expect(run.flagged).toBe(true);
    expect(run.add(hit(310), cfg)).toBe(true);
    expect(run.period()).toBe(50);
    expect(run.add(hit(335), cfg)).toBe(false);
    expect(run.add(hit(440), cfg)).toBe(false);
    expect(run.last.frame).toBe(310);
  });

  it('before it is flagged, a skipped stall breaks the period', () => {
    const run = runOf([10, 60, 160, 210]);
    expect(run.hits).toBe(2);
    expect([run.first.frame, run.period()]).toEqual([60, 100]);
  });

  it('costs what the stalls after the first saved over the wall time since the first', () => {
    const run = runOf([0, 50, 100]);
    // Two stalls of 4 s saved in 100 steps of 1.2 s plus the two stalls' own 8 s.
    expect(run.costPct()).toBeCloseTo((100 * 8000) / (100 * 1200 + 8000), 6);
    expect(run.periodMs()).toBeCloseTo((100 * 1200 + 8000) / 2, 6);
  });
});
