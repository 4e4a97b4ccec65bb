/**
 * The straggler's two questions on a fleet whose GPUs are not equally fast (issue 29): a GPU's fixed
 * offset is silicon, ranked but not a finding unless replacing it would buy the job 5%; a GPU that
 * turns slower than its own past is a finding at once, whatever its offset, and stays open while it
 * stays slow.
 */
import { describe, expect, it } from 'vitest';
import type { Finding } from '../../schema/finding.js';
import type { SlowGpu } from '../../schema/output.js';
import { ClusterSim, type SimOptions } from '../../sim/cluster.js';
import { parseFault } from '../../sim/faults.js';
import { DetectorRunner } from '../runner.js';

function run(opts: SimOptions): { sim: ClusterSim; findings: Finding[]; ranking: SlowGpu[] } {
  const sim = new ClusterSim(opts);
  const runner = new DetectorRunner();
  for (const e of sim.events()) runner.push(e);
  runner.flush();
  const { findings, slowGpus = [] } = runner.take();
  const last = Math.max(...slowGpus.map((r) => r.ts));
  return { sim, findings, ranking: slowGpus.filter((r) => r.ts === last) };
}

/** The index of the GPU of `fast` in the job: the fastest of the job's GPUs (by the simulator's truth). */
function fastest(speeds: Float64Array): number {
  return [...speeds.keys()].reduce((a, b) => (speeds[b] < speeds[a] ? b : a));
}

describe('a fleet with per-GPU speed offsets N(0, 2.5%)', () => {
  const fleet = { ranks: 512, steps: 240, seed: 3, gpuOffsetSigma: 0.025 };

  it('raises nothing on a clean job, and ranks its slowest GPUs with what each costs', () => {
    const { sim, findings, ranking } = run(fleet);
    expect(findings.filter((f) => f.state === 'open').map((f) => f.summary)).toEqual([]);
    const speeds = sim.gpuSpeeds();
    const stage = (r: number) => sim.places[r].stage;
    const stageMedian = (s: number) => {
      const xs = sim.places.filter((p) => p.stage === s).map((p) => speeds[p.rank]);
      return xs.sort((a, b) => a - b)[xs.length >> 1];
    };
    expect(ranking.length).toBe(16);
    // Each ranked GPU's slowdown is its true offset from its stage's median, within half a point.
    for (const row of ranking) {
      const truth = 100 * (speeds[row.rank] / stageMedian(stage(row.rank)) - 1);
      expect(Math.abs(row.slowdown_pct - truth)).toBeLessThan(0.5);
      expect(row.host).toBe(sim.places[row.rank].host);
      expect(row.gpu).toBe(sim.places[row.rank].gpu);
    }
    // The costliest stage (the last: logits) sets the pace; its slowest GPU is the one the job waits
    // for, first in the ranking with a cost, and no GPU is costly enough for a finding.
    const last = sim.places.filter((p) => p.stage === 3).map((p) => p.rank);
    const slowestLast = last.reduce((a, b) => (speeds[b] > speeds[a] ? b : a));
    expect(ranking[0].rank).toBe(slowestLast);
    expect(ranking[0].cost_pct).toBeGreaterThan(0);
    expect(ranking[0].cost_pct).toBeLessThan(5);
    // A GPU of a cheaper stage costs nothing, however slow: the costlier stage still sets the pace.
    const cheap = ranking.filter((r) => r.stage !== 3);
    expect(cheap.length).toBeGreaterThan(0);
    for (const r of cheap) expect(r.cost_pct).toBe(0);
  });

  it('finds a fast GPU that turns 4% slower than its own past at its rank within 30 s, and keeps it open', () => {
    const speeds = new ClusterSim({ ...fleet, steps: 1 }).gpuSpeeds();
    const rank = fastest(speeds);
    const { sim, findings } = run({
      ...fleet,
      faults: [parseFault(`slow_rank:rank=${rank},at=60,slowdown=0.04`)],
    });
    const mine = findings.filter((f) => f.type === 'straggler' && f.rank === rank);
    expect(findings.filter((f) => f.state === 'open' && f.rank !== rank)).toEqual([]);
    const open = mine.filter((f) => f.state === 'open');
    expect(open).toHaveLength(1);
    expect(open[0]).toMatchObject({ host: sim.faults[0].host, gpu: sim.faults[0].gpu });
    expect((open[0].ts - sim.faults[0].onsetTs!) / 1000).toBeLessThanOrEqual(30);
    // Still faster than its peers' median, and slower than its own past by about the 4%.
    expect(open[0].evidence.own_level_pct as number).toBeLessThan(-5);
    // Never resolved while slow: its only resolution is the job's end.
    const resolved = mine.filter((f) => f.state === 'resolved');
    expect(resolved.map((f) => f.evidence.resolved_reason)).toEqual(['job_finished']);
    expect(resolved[0].evidence.change_pct as number).toBeGreaterThan(2.5);
  });

  it('resolves a rank that comes back to its own level, and does not open it again', () => {
    const speeds = new ClusterSim({ ...fleet, steps: 1 }).gpuSpeeds();
    const rank = fastest(speeds);
    const { findings } = run({
      ...fleet,
      faults: [parseFault(`slow_rank:rank=${rank},at=60,until=120,slowdown=0.06`)],
    });
    const mine = findings.filter((f) => f.type === 'straggler' && f.rank === rank);
    expect(mine.filter((f) => f.state === 'open')).toHaveLength(1);
    const resolved = mine.filter((f) => f.state === 'resolved');
    expect(resolved).toHaveLength(1);
    expect(resolved[0].evidence.resolved_reason).toBeUndefined();
  });
});

describe('a GPU slower than its peers from the start', () => {
  it('is a chronic finding when replacing it would buy the job 5%, and no throttle though it sits at its power cap', () => {
    // 16 ranks on two hosts; gpu-0001/2 is a 12% slower bin of silicon, at its cap on every busy sample.
    const { sim, findings, ranking } = run({
      ranks: 16,
      steps: 200,
      seed: 5,
      gpuOffsets: [{ host: 1, gpu: 2, pct: 12 }],
    });
    const open = findings.filter((f) => f.state === 'open');
    expect(open.map((f) => f.type)).toEqual(['straggler']);
    expect(open[0]).toMatchObject({ host: 'gpu-0001', gpu: 2, rank: 10 });
    expect(open[0].evidence.trigger).toBe('chronic');
    expect(open[0].est_cost_pct).toBeGreaterThanOrEqual(5);
    expect(ranking[0]).toMatchObject({ rank: 10, host: 'gpu-0001', gpu: 2 });
    expect(ranking[0].slowdown_pct).toBeGreaterThan(10);
    // Its telemetry: the power cap on busy samples, at its peers' draw.
    const samples = [...sim.events()].filter((e) => e.kind === 'gpu' && e.host === 'gpu-0001' && e.gpu === 2);
    const busy = samples.filter((e) => e.kind === 'gpu' && (e.util_pct ?? 0) > 50);
    expect(busy.every((e) => e.kind === 'gpu' && e.throttle_reasons & 0x4)).toBe(true);
  });

  it('below that share is in the ranking only', () => {
    const { findings, ranking } = run({
      ranks: 256,
      steps: 200,
      seed: 5,
      gpuOffsets: [{ host: 30, gpu: 1, pct: 4 }],
    });
    expect(findings.filter((f) => f.state === 'open')).toEqual([]);
    // Host 30 is in the last, costliest stage: the GPU the job waits for, first in the ranking.
    expect(ranking[0]).toMatchObject({ host: 'gpu-0030', gpu: 1 });
    expect(ranking[0].slowdown_pct).toBeGreaterThan(3);
    expect(ranking[0].cost_pct).toBeGreaterThan(0.5);
    expect(ranking[0].cost_pct).toBeLessThan(5);
  });
});
