/** Formatting and flag helpers shared by `rankwatch checkpoint` and `rankwatch failures`. */
import type { CheckpointAdvice, MissingInputs } from '../../analytics/checkpoint.js';
import type { RateEstimate } from '../../analytics/poisson.js';
import { RankwatchError } from '../../core/errors.js';

/** Seconds as a person reads them. */
export function dur(s: number | undefined | null): string {
  if (s === undefined || s === null || !Number.isFinite(s)) return '∞';
  if (s >= 86_400 * 2) return `${(s / 86_400).toFixed(2)} d`;
  if (s >= 3600) return `${(s / 3600).toFixed(2)} h`;
  if (s >= 60) return `${(s / 60).toFixed(1)} min`;
  return `${s.toFixed(1)} s`;
}

export const pct = (x: number | undefined) => (x === undefined ? '-' : `${(100 * x).toFixed(1)}%`);

/** A rate with its 95% interval, to 3 significant digits. */
export function rate(r: RateEstimate | null): string {
  if (!r) return 'no exposure';
  const g = (x: number) => (x === 0 ? '0' : x.toPrecision(3));
  return `${g(r.rate)} [${g(r.lo)}, ${g(r.hi)}]`;
}

/**
 * `--since`: an ISO time, epoch ms, or a span back from now (`90m`, `36h`, `7d`).
 * Returns epoch ms.
 */
export function parseSince(v: string, now: number): number {
  const span = /^(\d+(?:\.\d+)?)\s*(m|h|d)$/.exec(v.trim());
  if (span)
    return now - Number(span[1]) * { m: 60_000, h: 3_600_000, d: 86_400_000 }[span[2] as 'm' | 'h' | 'd'];
  if (/^\d{10,}$/.test(v)) return Number(v);
  const t = Date.parse(v);
  if (Number.isNaN(t))
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `--since needs an ISO time, epoch ms or a span like 7d, got "${v}"`,
    );
  return t;
}

/** The advice as lines of text. */
export function adviceLines(a: CheckpointAdvice | MissingInputs): string[] {
  if (!a.ok)
    return [`No advice yet: missing ${a.missing.join(' and ')}.`, ...a.needs.map((n) => `  needs ${n}`)];
  const lines = [
    `Young  √(2δM)                          ${dur(a.youngS)}`,
    `Daly   ${a.dalyBranch === 'higher_order' ? '(δ < 2M, higher order)        ' : '(δ ≥ 2M: the MTBF itself)     '}  ${dur(a.dalyS)}   ← recommended`,
    `expected efficiency at recommended     ${pct(a.efficiencyRecommended)}`,
  ];
  if (a.currentS !== undefined)
    lines.push(
      `expected efficiency at current         ${pct(a.efficiencyCurrent)}   (at ${dur(a.currentS)}: gives up ${a.currentLossPct!.toFixed(2)}% of goodput against the recommended)`,
    );
  for (const s of a.sensitivity)
    lines.push(
      `failure rate ${s.rateFactor < 1 ? 'halved ' : 'doubled'} (M = ${dur(s.mtbfS)}): Daly ${dur(s.intervalS)}, efficiency ${pct(s.efficiencyAtOwn)} (${pct(s.efficiencyAtAdvised)} at ${dur(a.recommendedS)})`,
    );
  if (a.asyncLagS > 0)
    lines.push(`asynchronous save: ${dur(a.asyncLagS)} written in the background, counted as extra rollback`);
  for (const n of a.notes) lines.push(`note: ${n}`);
  return lines;
}
