/**
 * The Flight Recorder analyzer's report on a simulated hang: one "Not all ranks joining
 * collective" block per process group the hung rank belongs to, naming it missing, as
 * torch/distributed/flight_recorder (utils.error_analysis, types.EntryState.log) prints them.
 */
import { describe, expect, it } from 'vitest';
import type { RankwatchEvent } from '../schema/events.js';
import { ClusterSim } from './cluster.js';
import { FlightRecorderReport } from './flight-recorder.js';

/** A job's events through the report, `keep` deciding which the ranks emitted. */
function report(keep: (e: RankwatchEvent) => boolean) {
  // 64 ranks: tp 8, pp 4, dp 2. Rank 13: tp 5, dp 1, stage 0, on gpu-0001.
  const sim = new ClusterSim({ ranks: 64, steps: 8, seed: 3, telemetry: false });
  const fr = new FlightRecorderReport(sim);
  for (const e of sim.events()) if (keep(e)) fr.take(e);
  return fr;
}

describe('simulated Flight Recorder report', () => {
  it('is empty when no rank hung', () => {
    const fr = report(() => true);
    expect(fr.hungRanks()).toEqual([]);
    expect(fr.text()).toBe('');
  });

  it("names the rank that never joined its groups' next collective", () => {
    // Rank 13 stops at step 3: every collective it is part of never completes there (its
    // tensor-parallel group 8-15, its data-parallel pair 5 and 13, its pipeline sends), while
    // the groups without it still finish step 3; then the whole job stands still.
    const stuck = (c: { comm: string }) => c.comm === 'tp.s0.d1' || c.comm === 'dp.s0.t5';
    const fr = report((e) => {
      if (!('step' in e) || e.kind !== 'collective') return !('step' in e) || (e.step ?? 0) <= 3;
      if (e.step > 3) return false;
      if (e.step < 3) return true;
      return !stuck(e) && e.rank !== 13 && e.peer !== 13;
    });
    expect(fr.hungRanks()).toEqual([13]);
    const blocks = fr
      .text()
      .replace(/\n$/, '')
      .split(/\n(?=Not all ranks)/);
    expect(blocks).toHaveLength(2);
    const tp = blocks.find((b) => b.includes(':tp.s0.d1'))!;
    expect(tp.split('\n')).toEqual([
      'Not all ranks joining collective, sequence number: 4',
      'internal record id: 3',
      expect.stringMatching(/^group info: \d+:tp\.s0\.d1$/),
      'collective: nccl:all_reduce',
      'missing ranks: {13}',
      expect.stringMatching(/^input sizes: \[\[\d+\]\]$/),
      expect.stringMatching(/^output sizes: \[\[\d+\]\]$/),
      'world size: 8',
      'expected ranks: {8, 9, 10, 11, 12, 13, 14, 15}',
      'collective state: scheduled',
      'collective stack trace: ',
      ' ',
    ]);
    const dp = blocks.find((b) => b.includes(':dp.s0.t5'))!;
    expect(dp).toContain('missing ranks: {13}\n');
    expect(dp).toContain('expected ranks: {5, 13}\n');
    expect(dp).toContain('world size: 2\n');
  });
});
