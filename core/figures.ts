/**
 * A finding's cost and a job's MFU as every screen says them: the live lines, the demo's summary,
 * `report`, `findings`, alerts and the page all format through here, and the detectors write the
 * cost into their summaries with the same words, so one figure never reads two ways. The figure
 * itself is the incident's latest `est_cost_pct` (what its last event carried); the job's MFU is
 * the store's (store/queries.ts JOB_MFU_SQL). Pure: the page's bundle imports it too.
 */
import { round } from './round.js';

/** The cost as a finding carries it (`est_cost_pct`): percent, two decimals. */
export const costFigure = (pct: number): number => round(pct, 2);

/** `6.0%`, or `none` when the finding has no cost. */
export function costText(pct: number | null | undefined, none = '-'): string {
  return pct === null || pct === undefined || !Number.isFinite(pct) ? none : `${round(pct, 1).toFixed(1)}%`;
}

/** The clause a summary says its cost with: `costs the job ~6.0% of its throughput`. */
export const costClause = (pct: number): string =>
  `costs the job ~${costText(costFigure(pct))} of its throughput`;

const COST_SAID = /(costs the job|would buy) ~\d+(?:\.\d+)?%/;

/**
 * The summary with its cost clause saying `pct`: a figure patched in after the summary was
 * written (a throttle takes its straggler's cost) never leaves the sentence saying another.
 */
export function withCost(summary: string, pct: number | undefined): string {
  return pct === undefined ? summary : summary.replace(COST_SAID, (_, verb) => `${verb} ~${costText(pct)}`);
}

/** An MFU (0..1) as a percent with one decimal, or `none`. */
export function mfuText(mfu: number | null | undefined, none = '-'): string {
  return mfu === null || mfu === undefined || !Number.isFinite(mfu) ? none : `${(mfu * 100).toFixed(1)}%`;
}

/** Costliest first, then the earlier; findings without a cost last. */
export const costliest = (
  a: { est_cost_pct?: number; ts: number },
  b: { est_cost_pct?: number; ts: number },
): number => (b.est_cost_pct ?? 0) - (a.est_cost_pct ?? 0) || a.ts - b.ts;
