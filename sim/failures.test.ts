import { describe, expect, it } from 'vitest';
import { causeGroup, normalizeCause } from '../analytics/causes.js';
import { adviseCheckpoint, efficiency } from '../analytics/checkpoint.js';
import { recordsFromEvents } from '../analytics/from-events.js';
import { jobTimeline } from '../analytics/interruptions.js';
import { failureRates } from '../analytics/rates.js';
import { LLAMA3_RUN, LLAMA3_TABLE5 } from './failure-mix.js';
import { FailureSim, simulateGoodput } from './failures.js';

/** A 54-day run of 2,048 hosts × 8 GPUs failing at Llama 3's per-cause rates (Table 5 counts / exposure). */
function llamaRun(seed: number, causeOnEvent = true) {
  const sim = new FailureSim({ seed, days: LLAMA3_RUN.days, causeOnEvent });
  const events = sim.events();
  const timelines = recordsFromEvents(events).map((r) => jobTimeline(r, events.at(-1)!.ts));
  return { sim, events, timelines };
}

describe('failure simulator at the scale of the Llama 3 run', () => {
  it('recovers every per-cause rate within its 95% interval, and the job MTBF', () => {
    // One seed; the next test checks coverage over 20 seeds, so this is not a chosen lucky draw alone.
    const { sim, timelines } = llamaRun(1);
    const truth = sim.truth();
    // Llama 3: 419 / (16,384 GPUs × 54 days × 24 h) = 1.9733e-5 per GPU-hour; MTBF 54·24/419 = 3.093 h.
    expect(truth.per_gpu_hour).toBeCloseTo(419 / (16_384 * 54 * 24), 12);
    expect(truth.job_mtbf_h).toBeCloseTo((54 * 24) / 419, 9);
    const report = failureRates(timelines, 'cause', LLAMA3_RUN.gpus);
    expect(report.fleet.count).toBeGreaterThan(300);
    // 18 intervals at 95% each: about one miss is expected by chance (exact intervals are
    // conservative, so fewer); more than one would say the rates or the intervals are off.
    const outside: string[] = [];
    for (const c of truth.causes) {
      const row = report.rows.find((r) => r.key === normalizeCause(c.cause));
      const trueRate = c.per_gpu_hour * 1e6;
      // A cause with no event has no row; its interval is then [0, 3.69 / exposure].
      const lo = row ? row.per_1m_gpu_hours!.lo : 0;
      const hi = row ? row.per_1m_gpu_hours!.hi : (3.6889 / report.fleet.gpu_hours) * 1e6;
      if (!(trueRate >= lo && trueRate <= hi)) outside.push(`${c.cause}: ${trueRate} not in [${lo}, ${hi}]`);
    }
    expect(outside.length, outside.join('; ')).toBeLessThanOrEqual(1);
    const m = report.mtbf!;
    expect(m.gpus).toBe(16_384);
    expect(truth.job_mtbf_h).toBeGreaterThanOrEqual(m.lo);
    expect(truth.job_mtbf_h).toBeLessThanOrEqual(m.hi!);
    expect(Math.abs(m.hours! - truth.job_mtbf_h) / truth.job_mtbf_h).toBeLessThan(0.15);
  });

  it('covers the true rates at least as often as a 95% interval should, over 20 runs', () => {
    let inside = 0;
    let total = 0;
    let mtbfInside = 0;
    for (let seed = 100; seed < 120; seed++) {
      const { sim, timelines } = llamaRun(seed);
      const report = failureRates(timelines, 'cause', LLAMA3_RUN.gpus);
      const m = report.mtbf!;
      if (sim.truth().job_mtbf_h >= m.lo && sim.truth().job_mtbf_h <= m.hi!) mtbfInside++;
      for (const c of sim.truth().causes) {
        const row = report.rows.find((r) => r.key === normalizeCause(c.cause));
        const hi = row ? row.per_1m_gpu_hours!.hi : (3.6889 / report.fleet.gpu_hours) * 1e6;
        const lo = row ? row.per_1m_gpu_hours!.lo : 0;
        total++;
        if (c.per_gpu_hour * 1e6 >= lo && c.per_gpu_hour * 1e6 <= hi) inside++;
      }
    }
    // Exact intervals are conservative: coverage ≥ 95% up to sampling (360 intervals).
    expect(inside / total).toBeGreaterThanOrEqual(0.93);
    // One interval per run for the MTBF: 20 draws at 95% leave room for a miss or two, not more.
    expect(mtbfInside).toBeGreaterThanOrEqual(17);
  });

  it("measures the ETTR Daly's efficiency model predicts for the simulated saves, restarts and rate", () => {
    const { sim, timelines } = llamaRun(1);
    const o = sim.opts;
    // τ = 1800 s, δ = 30 s, R = 600 s, M = 3.09 h: E = 1800 / (M·e^(R/M)·(e^((τ+δ)/M) − 1)) = 0.8575.
    const model = efficiency(o.intervalS, o.saveS, sim.truth().job_mtbf_h * 3600, o.restartS);
    expect(model).toBeCloseTo(0.8575, 3);
    expect(Math.abs(timelines[0].ettr! - model)).toBeLessThan(0.015);
  });

  it('attributes causes from the faults on the job hosts when the job_event names none', () => {
    const withCause = llamaRun(3, true).timelines[0];
    const fromFaults = llamaRun(3, false).timelines[0];
    expect(fromFaults.interruptions.length).toBe(withCause.interruptions.length);
    expect(fromFaults.interruptions.every((i) => i.cause_from === 'fault' && i.host)).toBe(true);
    // The fault names a part, not the table's row: the coarse group is what must agree.
    expect(fromFaults.interruptions.map((i) => i.group)).toEqual(
      withCause.interruptions.map((i) => causeGroup(i.cause)),
    );
  });

  it('keeps to the table: its counts sum to 419 and the mix is the table itself', () => {
    const sim = new FailureSim();
    const w = sim.truth().causes.reduce((s, c) => s + c.per_node_day, 0);
    expect(w).toBeCloseTo(419 / (2048 * 54), 12);
    expect(sim.opts.causes.map((c) => c.weight)).toEqual(LLAMA3_TABLE5.map((c) => c.count));
  });

  it('writes a week of a 2,048-node fleet without per-step events, quickly', () => {
    const t0 = performance.now();
    const events = new FailureSim({ jobs: 4, days: 7 }).events();
    expect(performance.now() - t0).toBeLessThan(2000);
    expect(events.some((e) => e.kind === 'step')).toBe(false);
    expect(new Set(events.filter((e) => e.kind === 'job').map((e) => (e as { job: string }).job)).size).toBe(
      4,
    );
    for (let i = 1; i < events.length; i++) expect(events[i].ts).toBeGreaterThanOrEqual(events[i - 1].ts);
  });
});

describe('checkpoint advice against simulated goodput', () => {
  it('the interval that maximises simulated goodput over a grid is within 10% of the advised one', () => {
    const saveS = 60;
    const restartS = 600;
    const mtbfS = 3 * 3600;
    const advice = adviseCheckpoint({ saveS, mtbfS, restartS });
    if (!advice.ok) throw new Error('expected advice');
    // A grid from 0.4× to 2.5× the advice in steps of 2%. Goodput is flat near the optimum (±5% moves it
    // by ~0.05 points), so the horizon is long: 100,000 MTBFs, where the argmax over seeds 1-10 fell
    // within ±4.5% of the advice (±6% at 20,000 MTBFs).
    const grid = Array.from({ length: 93 }, (_, k) => advice.recommendedS * 0.4 * 1.02 ** k);
    const runs = simulateGoodput({
      intervalsS: grid,
      saveS,
      restartS,
      mtbfS,
      horizonS: 100_000 * mtbfS,
      seed: 11,
    });
    const best = runs.reduce((a, b) => (b.goodput > a.goodput ? b : a));
    expect(Math.abs(best.intervalS - advice.recommendedS) / advice.recommendedS).toBeLessThan(0.1);
    // The simulated goodput matches Daly's efficiency model where it matters, too.
    const atAdvice = simulateGoodput({
      intervalsS: [advice.recommendedS],
      saveS,
      restartS,
      mtbfS,
      horizonS: 100_000 * mtbfS,
      seed: 11,
    })[0];
    expect(atAdvice.goodput).toBeCloseTo(efficiency(advice.recommendedS, saveS, mtbfS, restartS), 2);
    // And the grid's ends do worse: the optimum is inside, not at an edge.
    expect(runs[0].goodput).toBeLessThan(best.goodput - 0.005);
    expect(runs.at(-1)!.goodput).toBeLessThan(best.goodput - 0.005);
  });
});
