import { Value } from '@sinclair/typebox/value';
import { describe, expect, it } from 'vitest';
import { recordsFromEvents } from '../../analytics/from-events.js';
import { jobTimeline } from '../../analytics/interruptions.js';
import { jobAdvice } from '../../analytics/job-advice.js';
import type { RankwatchEvent } from '../../schema/events.js';
import { Finding } from '../../schema/finding.js';
import { FailureSim } from '../../sim/failures.js';
import { DetectorRunner } from '../runner.js';

const run = (
  events: RankwatchEvent[],
  cfg: { gpuMtbfH?: number; maxLossPct?: number; minInterruptions?: number } = {},
) => {
  const r = new DetectorRunner({ checkpointInterval: { maxLossPct: 1, minInterruptions: 3, ...cfg } });
  for (const e of events) r.push(e);
  return r.take().findings.filter((f) => f.type === 'checkpoint_interval');
};

// Daly's complete model, by hand: E(τ) = τ / (M·e^(R/M)·(e^((τ+δ)/M) − 1)); Daly's τ for δ < 2M.
const E = (t: number, d: number, M: number, R: number) =>
  t / (M * Math.exp(R / M) * (Math.exp((t + d) / M) - 1));
const dalyS = (d: number, M: number) => {
  const x = d / (2 * M);
  return Math.sqrt(2 * d * M) * (1 + Math.sqrt(x) / 3 + x / 9) - d;
};

const fleet = (intervalS: number) =>
  new FailureSim({
    nodes: 32,
    days: 7,
    ratePerNodeDay: 0.05,
    seed: 4,
    startTs: Date.UTC(2026, 0, 1),
    intervalS,
    saveS: 45,
    restartS: 900,
  }).events();

describe('checkpoint_interval in the live pipeline', () => {
  it('a job saving every 4 h with an MTBF of hours is found from its own saves and interruptions, as the offline advice says', () => {
    const events = fleet(4 * 3600);
    const found = run(events);
    const opens = found.filter((f) => f.state === 'open');
    expect(opens).toHaveLength(1);
    const open = opens[0];
    expect(Value.Check(Finding, open)).toBe(true);
    expect(open.job).toBe('fleet-0');
    expect(open.action).toBe('none');
    expect(open.evidence.current_s).toBe(14400);
    expect(open.evidence.save_s).toBe(45);
    expect(String(open.evidence.mtbf_from)).toMatch(/the job's \d+ interruption\(s\)/);
    // Not before its third interruption (fewer are too few to alert on); with one allowed, sooner.
    expect(open.evidence.interruptions).toBe(3);
    const eager = run(events, { minInterruptions: 1 }).find((f) => f.state === 'open');
    expect(eager?.evidence.interruptions).toBe(1);
    expect(eager!.ts).toBeLessThan(open.ts);
    // The cost from the evidence, by hand.
    const { save_s: d, mtbf_s: M, restart_s: R, current_s: t } = open.evidence as Record<string, number>;
    expect(R).toBe(900);
    const best = dalyS(d, M);
    expect(open.evidence.recommended_s).toBeCloseTo(best, 0);
    expect(open.est_cost_pct).toBeCloseTo((100 * (E(best, d, M, R) - E(t, d, M, R))) / E(best, d, M, R), 1);
    // What the live runner saw at that moment is what `checkpoint --job` computes from the same events.
    const [rec] = recordsFromEvents(events.filter((e) => e.ts <= open.ts));
    const offline = jobAdvice(jobTimeline(rec, open.ts), rec.saves);
    expect(offline.inputs.mtbfS.value).toBeCloseTo(M, -1);
    expect(offline.inputs.intervalS.value).toBeCloseTo(t, 6);
    // Updates are rare (the cost moves with M as interruptions come); it resolves when the job finishes.
    expect(found.filter((f) => f.state === 'update').length).toBeLessThan(10);
    expect(found.at(-1)?.state).toBe('resolved');
    expect(found.at(-1)?.evidence.resolved_reason).toBe('job_finished');
  });

  it('stays quiet for a job that saves near the advised interval', () => {
    // MTBF 24 h / (0.05 × 32) = 15 h: Daly's interval for 45 s saves is about 36 min.
    expect(dalyS(45, 15 * 3600) / 60).toBeCloseTo(36.2, 1);
    expect(run(fleet(2200))).toEqual([]);
  });

  describe('a job with no interruption yet', () => {
    const t0 = Date.UTC(2026, 0, 1);
    const ranks = 4;
    // 64 GPUs, a 60 s save (ranks 0-3 report it, the slowest 60 s) after every 4 h of compute, no failure.
    const events = [
      {
        v: 1,
        kind: 'job',
        ts: t0,
        job: 'big',
        world_size: 64,
        gpu_model: 'H100-SXM',
        dtype: 'bf16',
        parallel: { tp: 8, pp: 1, dp: 8 },
        flops_per_step: 1e15,
      },
      { v: 1, kind: 'job_event', ts: t0, job: 'big', event: 'start' },
      ...[1, 2, 3, 4].flatMap((k) =>
        Array.from({ length: ranks }, (_, rank) => ({
          v: 1,
          kind: 'checkpoint',
          ts: t0 + k * (4 * 3600 + 60) * 1000 - (ranks - 1 - rank) * 500,
          job: 'big',
          rank,
          step: k * 1000,
          phase: 'save',
          dur_ms: 57_000 + rank * 1000,
          ok: true,
        })),
      ),
    ] as RankwatchEvent[];

    it('gives no finding without a configured fleet MTBF (a guess is not advice)', () => {
      expect(run(events)).toEqual([]);
    });

    it("with one, takes it for the job's size, and counts a save every rank reports once", () => {
      // 192 GPU-hours per failure over 64 GPUs: M = 3 h.
      const [f, ...rest] = run(events, { gpuMtbfH: 192 });
      expect(rest).toEqual([]);
      expect(f.state).toBe('open');
      expect(f.evidence.mtbf_s).toBe(10_800);
      expect(String(f.evidence.mtbf_from)).toMatch(/configured fleet MTBF of 192 GPU-hours over its 64 GPUs/);
      expect(f.evidence.save_s).toBe(60);
      // Opened when the third save began: two complete saves, one gap.
      expect(f.evidence.saves).toBe(2);
      // Gap between save ends 4 h + 60 s, minus the 60 s save: 4 h of compute.
      expect(f.evidence.current_s).toBe(14_400);
      const best = dalyS(60, 10_800);
      expect(f.est_cost_pct).toBeCloseTo(
        (100 * (E(best, 60, 10_800, 0) - E(14_400, 60, 10_800, 0))) / E(best, 60, 10_800, 0),
        1,
      );
      // The threshold is configurable: the same job under a 50% allowance has no finding.
      expect(run(events, { gpuMtbfH: 192, maxLossPct: 50 })).toEqual([]);
    });
  });
});
