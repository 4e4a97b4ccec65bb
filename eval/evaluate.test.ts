import { beforeAll, describe, expect, it } from 'vitest';
import { DETECTOR_DEFAULTS, DetectorRunner } from '../detectors/runner.js';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { type FamilySummary, type RunResult, runCase, summarise } from './evaluate.js';
import { type EvalCase, expand, FAMILIES, type MatrixSpec } from './matrix.js';
import { HEAD, markdownTable, rows } from './report.js';

/** The smallest useful matrix: one clean and one throttled 64-rank job, 120 steps (~2.5 min of event time). */
const TINY: MatrixSpec = {
  sizes: [{ ranks: 64, seeds: [1] }],
  steps: 120,
  families: FAMILIES.filter((f) => f.name === 'clean' || f.name === 'throttle'),
};

const STEP_MS = 1200; // the simulator's default step time

describe('expand', () => {
  it('builds one case per family, size and seed, reproducibly', () => {
    const a = expand(TINY);
    expect(a.map((c) => c.family)).toEqual(['clean', 'throttle']);
    expect(a.every((c) => c.ranks === 64 && c.seed === 1 && c.sim.steps === 120)).toBe(true);
    expect(a[0].sim.faults).toEqual([]);
    expect(a[1].sim.faults).toHaveLength(1);
    expect(expand(TINY)).toEqual(a);
    const spec = a[1].sim.faults![0];
    expect(spec.type).toBe('throttle');
    expect(spec.rank).toBeGreaterThanOrEqual(0);
    expect(spec.rank).toBeLessThan(64);
    expect(spec.at).toBeGreaterThanOrEqual(40);
    expect(spec.at).toBeLessThan(80);
  });

  it('passes extra simulator options to every case', () => {
    expect(expand(TINY, { spikeProb: 0.01 }).map((c) => c.sim.spikeProb)).toEqual([0.01, 0.01]);
  });
});

describe('evaluate a tiny matrix', () => {
  let cases: EvalCase[];
  let results: RunResult[];
  let summary: FamilySummary[];
  let clean: RunResult;
  let throttled: RunResult;

  beforeAll(() => {
    cases = expand(TINY);
    results = cases.map((c) => runCase(c));
    summary = summarise(results);
    [clean, throttled] = results;
  });

  it('finds no fault and raises nothing on the clean job', () => {
    expect(clean.family).toBe('clean');
    expect(clean.faulty).toBe(false);
    expect(clean.detected).toBe(false);
    expect(clean.ttdMs).toBeUndefined();
    expect(clean.falseFindings).toEqual([]);
    expect(clean.events).toBeGreaterThan(0);
  });

  it('catches the throttle with no false finding, in less time than the job ran', () => {
    expect(throttled.faulty).toBe(true);
    expect(throttled.detected).toBe(true);
    expect(throttled.falseFindings).toEqual([]);
    const durationMs = (throttled.rankHours * 3.6e6) / throttled.ranks;
    // The event-time span is about steps x step time (a throttled job runs somewhat slower).
    expect(durationMs).toBeGreaterThan(0.9 * TINY.steps * STEP_MS);
    expect(durationMs).toBeLessThan(1.5 * TINY.steps * STEP_MS);
    expect(throttled.ttdMs).toBeGreaterThan(0);
    expect(throttled.ttdMs!).toBeLessThan(durationMs);
    expect(throttled.trueCostPct).toBeGreaterThan(0);
    expect(throttled.estCostPct).toBeGreaterThan(0);
  });

  it('names the host and GPU the fault was injected on', () => {
    const c = cases[1];
    const rank = c.sim.faults![0].rank!;
    const sim = new ClusterSim(c.sim);
    // Rank -> host/GPU worked out independently: 8 GPUs per host, rank order packed onto hosts.
    const host = `gpu-${String(Math.floor(rank / 8)).padStart(4, '0')}`;
    const gpu = rank % 8;
    expect(sim.faults[0].host).toBe(host);
    expect(sim.faults[0].gpu).toBe(gpu);
    const runner = new DetectorRunner();
    let lastTs = 0;
    for (const e of sim.events()) {
      runner.push(e);
      lastTs = Math.max(lastTs, e.ts);
    }
    runner.flush();
    const findings: Finding[] = runner.take().findings;
    const opened = findings.filter(
      (f) => f.state === 'open' && ['throttle', 'straggler', 'slow_link'].includes(f.type),
    );
    expect(opened.length).toBeGreaterThan(0);
    for (const f of opened) {
      expect(f.host).toBe(host);
      if (f.gpu !== undefined) expect(f.gpu).toBe(gpu);
    }
    expect(opened.some((f) => f.type === 'throttle' && f.gpu === gpu)).toBe(true);
    // The evaluation's time to detect is the first such finding's, after onset.
    const first = Math.min(...opened.map((f) => f.ts));
    expect(first - sim.faults[0].onsetTs!).toBe(throttled.ttdMs);
    // ...which lies between the onset and the job's last event.
    expect(first).toBeGreaterThan(sim.faults[0].onsetTs!);
    expect(first).toBeLessThanOrEqual(lastTs);
  });

  it('summarises recall 1 for the fault and zero false findings', () => {
    expect(summary.map((s) => s.family)).toEqual(['clean', 'throttle']);
    const [c, t] = summary;
    expect(c.recall).toBeUndefined();
    expect(c.falseFindings).toBe(0);
    expect(c.falsePer1000RankHours).toBe(0);
    expect(c.rankHours).toBeCloseTo(clean.rankHours, 9);
    expect(t.recall).toBe(1);
    expect(t.detected).toBe(1);
    expect(t.runs).toBe(1);
    expect(t.ttdMedianS).toBeCloseTo(throttled.ttdMs! / 1000, 9);
    expect(t.ttdWorstS).toBeCloseTo(throttled.ttdMs! / 1000, 9);
    expect(t.costErrorPp).toBeCloseTo(Math.abs(throttled.estCostPct! - throttled.trueCostPct!), 9);
    // Time to detect in steps: the steps completed from onset to the finding, each about a step long.
    expect(throttled.ttdSteps).toBeGreaterThanOrEqual(1);
    expect(throttled.ttdMs! / throttled.ttdSteps!).toBeGreaterThan(0.8 * 1200);
    expect(throttled.ttdMs! / throttled.ttdSteps!).toBeLessThan(3 * 1200);
    expect(t.ttdMedianSteps).toBe(throttled.ttdSteps);
    expect(t.falseFindings).toBe(0);
  });

  it('renders the figures the evaluation produced', () => {
    const md = markdownTable(HEAD, rows(summary));
    const lines = md.split('\n');
    expect(lines).toHaveLength(2 + summary.length);
    const cells = (line: string) => line.slice(2, -2).split(' | ');
    for (const [i, s] of summary.entries()) {
      const row = cells(lines[2 + i]);
      expect(row).toHaveLength(HEAD.length);
      const col = (name: string) => row[HEAD.indexOf(name)];
      expect(col('scenario')).toBe(s.family);
      expect(col('runs')).toBe(String(s.runs));
      expect(col('false findings')).toBe(String(s.falseFindings));
      expect(col('rank-hours')).toBe(Math.round(s.rankHours).toLocaleString('en-US'));
      expect(col('false / 1000 rank-h')).toBe(s.falsePer1000RankHours.toFixed(2));
      if (s.recall === undefined) {
        expect(col('recall')).toBe('–');
        expect(col('TTD median (s)')).toBe('–');
      } else {
        expect(col('recall')).toBe(`${s.detected}/${s.runs} (${Math.round(s.recall * 100)}%)`);
        expect(col('TTD median (s)')).toBe(s.ttdMedianS!.toFixed(1));
        expect(col('TTD worst (s)')).toBe(s.ttdWorstS!.toFixed(1));
        expect(col('cost error (pp)')).toBe(s.costErrorPp!.toFixed(2));
      }
    }
    // And from the raw run, not only the summary: the throttle row shows its TTD in seconds.
    expect(cells(lines[3])[HEAD.indexOf('TTD median (s)')]).toBe((throttled.ttdMs! / 1000).toFixed(1));
    expect(cells(lines[3])[HEAD.indexOf('recall')]).toBe('1/1 (100%)');
  });
});

describe('a finding that resolves while its fault persists', () => {
  /** A 64-rank job whose rank 9 runs 30% slow on one step in three from step 50 (to `until`, or to the end). */
  const slowCase = (until?: number): EvalCase => ({
    family: 'intermittent',
    ranks: 64,
    seed: 2,
    sim: {
      ranks: 64,
      steps: 160,
      seed: 2,
      telemetry: false,
      faults: [{ type: 'intermittent', rank: 9, at: 50, until, slowdown: 0.3, every: 3 }],
    },
  });

  it('is counted: a straggler that resolves after two healthy steps flaps while the rank stays slow', () => {
    // Resolving on the two healthy steps between slow ones (the detector's default waits for ~20),
    // the finding resolves and opens again while the fault goes on.
    const flappy = { straggler: { ...DETECTOR_DEFAULTS.straggler, resolveH: 2 } };
    const r = runCase(slowCase(), flappy);
    expect(r.detected).toBe(true);
    expect(r.resolvedWhileActive).toBeGreaterThan(0);
  });

  it('is not counted by default, nor once the fault has ended', () => {
    const persists = runCase(slowCase());
    expect(persists.detected).toBe(true);
    expect(persists.resolvedWhileActive).toBe(0);
    const ends = runCase(slowCase(100));
    expect(ends.detected).toBe(true);
    expect(ends.resolvedWhileActive).toBe(0);
  });
});
