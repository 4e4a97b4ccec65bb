/**
 * The `checkpoint_interval` finding: a job's current interval gives up more than a set share of
 * goodput against Daly's interval for its measured save time and failure rate. Pure: advice and
 * event time in, a finding (or none) out. Not a hardware fault, so the action is never a cordon.
 */
import type { CheckpointAdvice } from '../../analytics/checkpoint.js';
import { round } from '../../core/round.js';
import type { Finding } from '../../schema/finding.js';
import { findingId } from '../findings.js';

export interface CheckpointIntervalConfig {
  /** Goodput the current interval may give up against the optimum before a finding, percent. */
  maxLossPct: number;
}

export const CHECKPOINT_INTERVAL_DEFAULTS: CheckpointIntervalConfig = { maxLossPct: 1 };

const fmt = (s: number) =>
  s >= 3600 ? `${round(s / 3600, 2)} h` : s >= 60 ? `${round(s / 60, 1)} min` : `${round(s, 1)} s`;

export function checkpointIntervalFinding(
  job: string,
  advice: CheckpointAdvice,
  now: number,
  cfg: CheckpointIntervalConfig = CHECKPOINT_INTERVAL_DEFAULTS,
): Finding | undefined {
  if (advice.currentS === undefined || advice.currentLossPct === undefined) return undefined;
  if (advice.currentLossPct <= cfg.maxLossPct) return undefined;
  const longer = advice.currentS > advice.recommendedS;
  const cost = round(advice.currentLossPct, 2);
  return {
    id: findingId('checkpoint_interval', job),
    ts: now,
    type: 'checkpoint_interval',
    state: 'open',
    job,
    host: '',
    severity: cost >= 5 ? 'warning' : 'info',
    evidence: {
      current_s: round(advice.currentS, 1),
      recommended_s: round(advice.recommendedS, 1),
      young_s: round(advice.youngS, 1),
      save_s: round(advice.saveS, 2),
      mtbf_s: round(advice.mtbfS, 0),
      restart_s: round(advice.restartS, 1),
      efficiency_current: round(advice.efficiencyCurrent ?? 0, 4),
      efficiency_recommended: round(advice.efficiencyRecommended, 4),
    },
    est_cost_pct: cost,
    action: 'none',
    summary: `${job} saves every ${fmt(advice.currentS)} of compute; with ${fmt(advice.saveS)} saves and an MTBF of ${fmt(advice.mtbfS)}, every ${fmt(advice.recommendedS)} (Daly) would keep ${cost}% more of its goodput (${longer ? 'too much work lost per failure' : 'too much time spent saving'}).`,
  };
}
