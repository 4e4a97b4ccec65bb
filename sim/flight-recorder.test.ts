/**
 * The Flight Recorder analyzer's report on a simulated hang, as the dumps the ranks wrote when
 * their watchdogs fired show it: one "Not all ranks joining collective" block per process group
 * some members wait in, naming the members that never entered it, as
 * torch/distributed/flight_recorder (utils.error_analysis, types.EntryState.log) prints them.
 */
import { describe, expect, it } from 'vitest';
import { ClusterSim } from './cluster.js';
import type { FaultSpec } from './faults.js';
import { FlightRecorderReport } from './flight-recorder.js';

/** 64 ranks: tp 8, pp 4, dp 2. Rank 13: tp 5, dp 1, stage 0, on gpu-0001. */
function report(faults: FaultSpec[]) {
  const sim = new ClusterSim({ ranks: 64, steps: 24, seed: 3, telemetry: false, faults });
  const fr = new FlightRecorderReport(sim);
  for (const e of sim.events()) fr.take(e);
  return fr
    .text()
    .replace(/\n$/, '')
    .split(/\n(?=Not all ranks)/)
    .filter(Boolean);
}

const field = (block: string, name: string) => new RegExp(`^${name}: (.*)$`, 'm').exec(block)?.[1];

describe('simulated Flight Recorder report', () => {
  it('is empty when no rank hung, and when the hang ended before any watchdog fired (no dump)', () => {
    expect(report([])).toEqual([]);
    expect(report([{ type: 'hang', rank: 13, at: 10, for: 60 }])).toEqual([]);
  });

  for (const type of ['hang', 'hang_allreduce'] as const)
    it(`${type}: names the hung rank missing from both its groups, taken before the restart`, () => {
      const blocks = report([{ type, rank: 13, at: 10, for: 660 }]);
      const tp = blocks.find((b) => field(b, 'group info')?.endsWith(':tp.s0.d1'))!;
      expect(tp.split('\n')).toEqual([
        `Not all ranks joining collective, sequence number: ${type === 'hang' ? 11 : 12}`,
        `internal record id: ${type === 'hang' ? 10 : 11}`,
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
      const dp = blocks.find((b) => field(b, 'group info')?.endsWith(':dp.s0.t5'))!;
      expect(field(dp, 'missing ranks')).toBe('{13}');
      expect(field(dp, 'expected ranks')).toBe('{5, 13}');
      // Ranks stuck elsewhere are missing from their own data-parallel groups too, once each:
      // its tensor-parallel peers (which joined the block above) and its pipeline neighbour.
      const once = blocks
        .filter((b) => b !== tp && b !== dp)
        .map((b) => field(b, 'missing ranks'))
        .sort();
      expect(once).toEqual(['{10}', '{11}', '{12}', '{14}', '{15}', '{29}', '{8}', '{9}']);
    });
});
