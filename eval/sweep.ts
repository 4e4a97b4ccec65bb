/**
 * The straggler detector's trade-off curve: for each CUSUM threshold h, the false-finding rate on
 * clean jobs under stress (spikes ten times as often as the default) against the time to detect a
 * 5% slow rank and a rank 30% slow on one step in three.
 */
import { DETECTOR_DEFAULTS } from '../detectors/runner.js';
import { runCase, summarise } from './evaluate.js';
import { expand, FAMILIES, type MatrixSpec } from './matrix.js';

export interface SweepRow {
  h: number;
  falsePer1000RankHours: number;
  rankHours: number;
  slowRecall: number;
  slowTtdMedianS?: number;
  intermittentRecall: number;
  intermittentTtdMedianS?: number;
}

export const SWEEP_H = [8, 12, 16, 20, 24, 32];

export function sweep(hs: number[] = SWEEP_H, seeds = [1, 2, 3, 4], onRun?: () => void): SweepRow[] {
  const pick = (name: string) => FAMILIES.filter((f) => f.name.startsWith(name));
  const stress: MatrixSpec = {
    sizes: [{ ranks: 256, seeds }],
    steps: 240,
    families: FAMILIES.filter((f) => f.name === 'clean'),
  };
  const faults: MatrixSpec = {
    sizes: [{ ranks: 256, seeds }],
    steps: 240,
    families: [...pick('slow_rank 5%'), ...pick('intermittent')],
  };
  const cases = [...expand(stress, { spikeProb: 0.003 }), ...expand(faults)];
  return hs.map((h) => {
    const straggler = { ...DETECTOR_DEFAULTS.straggler, h };
    const results = cases.map((c) => {
      const r = runCase(c, { straggler });
      onRun?.();
      return r;
    });
    const s = summarise(results);
    const clean = s.find((x) => x.family === 'clean')!;
    const slow = s.find((x) => x.family.startsWith('slow_rank'))!;
    const inter = s.find((x) => x.family.startsWith('intermittent'))!;
    return {
      h,
      falsePer1000RankHours: clean.falsePer1000RankHours,
      rankHours: clean.rankHours,
      slowRecall: slow.recall ?? 0,
      slowTtdMedianS: slow.ttdMedianS,
      intermittentRecall: inter.recall ?? 0,
      intermittentTtdMedianS: inter.ttdMedianS,
    };
  });
}
