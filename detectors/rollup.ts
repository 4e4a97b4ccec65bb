/** Per-step, per-stage summary of a job's ranks: what the heatmap and dashboards read. */

import type { StepRollup } from '../schema/output.js';
import { medianInPlace } from './robust.js';
import type { RankTable, StepFrame } from './steps.js';

export function rollupSteps(
  job: string,
  f: StepFrame,
  table: RankTable,
  scratch: Float64Array,
  out: StepRollup[],
): number {
  let jobStepMs = 0;
  for (let stage = 0; stage < table.stageMembers.length; stage++) {
    let n = 0;
    let maxMs = -1;
    let maxRank = -1;
    let stepMs = 0;
    for (const r of table.stageMembers[stage]) {
      if (!f.seen[r]) continue;
      const c = f.compute[r];
      scratch[n++] = c;
      if (c > maxMs) {
        maxMs = c;
        maxRank = r;
      }
      if (f.stepMs[r] > stepMs) stepMs = f.stepMs[r];
    }
    if (n === 0) continue;
    const p50 = medianInPlace(scratch, n);
    let w = 0;
    for (const r of table.stageMembers[stage])
      if (f.seen[r] && f.commWait[r] >= 0) scratch[w++] = f.commWait[r];
    out.push({
      job,
      step: f.step,
      stage,
      ts: f.ts,
      ranks: n,
      step_ms: stepMs,
      compute_p50_ms: p50,
      compute_max_ms: maxMs,
      compute_max_rank: maxRank,
      comm_wait_p50_ms: w > 0 ? medianInPlace(scratch, w) : 0,
    });
    if (stepMs > jobStepMs) jobStepMs = stepMs;
  }
  return jobStepMs;
}
