/**
 * The slow-link detector's change detection: a score in robust units (distance from the peers'
 * median over their smoothed, floored spread) fed to a one-sided CUSUM with bounded increments,
 * and a second CUSUM that decides when the condition has cleared. The straggler detector shares
 * the settings (CusumConfig) and scores each rank about its own level instead. The reasoning and
 * the false-alarm design are in docs/detectors.md.
 */

export interface CusumConfig {
  /** Reference: shifts below k robust units are not worth a finding. */
  k: number;
  /** Decision threshold. */
  h: number;
  /** Largest score one step can add, so one spike cannot fire (and cap > 3k lets a 1-in-3 fault). */
  cap: number;
  /** Floor on the peers' spread, log units, so a very quiet group cannot amplify noise. */
  minSigma: number;
  /** Weight of the newest step in the smoothed spread. */
  sigmaAlpha: number;
  /** Evidence of normality (the second CUSUM, on k - score) that resolves a finding. */
  resolveH: number;
  /** Fewer peers than this in a step: not compared. */
  minPeers: number;
}

/** The spread after this step's estimate: smoothed across steps. */
export function smoothSpread(previous: number | undefined, spread: number, c: CusumConfig): number {
  return previous === undefined ? spread : previous + c.sigmaAlpha * (spread - previous);
}

/** A deviation (log units) as a bounded score in robust units of the smoothed spread. */
export function score(deviation: number, spread: number, c: CusumConfig): number {
  return Math.min(deviation / Math.max(spread, c.minSigma), c.cap);
}

/** The alarm statistic after a step with this score. */
export function rise(s: number, x: number, c: CusumConfig): number {
  return Math.max(0, s + x - c.k);
}

/** The resolve statistic after a step with this score: it grows while the score stays below k. */
export function fall(clear: number, x: number, c: CusumConfig): number {
  return Math.max(0, clear + c.k - x);
}
