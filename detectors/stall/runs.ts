/**
 * The periodicity test of the recurring-stall detector: one rank's stalls (steps where it held the
 * job up by seconds) as a run of hits spaced by a steady period. A hit that comes too early for the
 * period is a spike between stalls and is ignored; one too late starts a new run from the last two
 * hits. Random spikes must line up `hits` times within the tolerance to fire (false-alarm design in
 * docs/detectors.md). O(1) per rank, and kept only for ranks that have stalled.
 */

export interface StallRunConfig {
  /** Shortest gap, in steps, between two stalls of a run (shorter periods are the straggler's periodic test). */
  minGap: number;
  /** Longest gap between two stalls of a run. */
  maxGap: number;
  /** A gap within this share of the run's period (the mean of its gaps so far) continues the run. */
  tolerance: number;
  /** Stalls in a run that fire. */
  hits: number;
  /** Once fired: stalls the period may skip (a stall hidden by a checkpoint) and the run goes on. */
  maxMissed: number;
}

/** One stall: when, how long the rank held the job up, and what it cost. */
export interface StallHit {
  /** The detector's frame count at the stall (gaps are counted in frames). */
  frame: number;
  step: number;
  /** Event time the stalled step began. */
  ts: number;
  /** How far the rank was behind its stage peers (ms). */
  stallMs: number;
  /** How much shorter the step would have been without it (ms). */
  savedMs: number;
  /** The job's wall time up to the end of this step (ms). */
  wallMs: number;
  /** Seen in the rank's own compute (true) or only in its peers' wait for it (false). */
  inCompute: boolean;
  /**
   * On or next to a checkpoint save's step: the stall may be the checkpoint's. It can continue a
   * run at its period but never starts or grows one.
   */
  excused: boolean;
}

export class StallRun {
  /** Stalls counted (excused ones not). */
  hits = 0;
  first!: StallHit;
  last!: StallHit;
  /** Steps spanned by the run's gaps, and the periods they make (a skipped stall makes a gap of two). */
  gapSteps = 0;
  periods = 0;
  stallSum = 0;
  stallMin = Number.POSITIVE_INFINITY;
  stallMax = 0;
  /** What the stalls after the first saved, over the wall time from the first to the last. */
  savedSum = 0;
  inCompute = 0;
  flagged = false;

  constructor(hit: StallHit) {
    this.start(hit);
  }

  period(): number {
    return this.periods > 0 ? this.gapSteps / this.periods : Number.NaN;
  }

  /** Share of the job's wall time the stalls cost, from the first to the last (percent). */
  costPct(): number {
    const span = this.last.wallMs - this.first.wallMs;
    return span > 0 ? Math.min(99.99, (100 * this.savedSum) / span) : 0;
  }

  /** Mean wall time between stalls (ms). */
  periodMs(): number {
    return this.periods > 0 ? (this.last.wallMs - this.first.wallMs) / this.periods : Number.NaN;
  }

  /** Takes a hit; returns whether it counted as one of the run's stalls. */
  add(h: StallHit, cfg: StallRunConfig): boolean {
    const gap = h.frame - this.last.frame;
    if (this.periods === 0) {
      if (h.excused) return false;
      // Too close (a burst of stalls: the straggler's short-period test) or too far: starts afresh.
      if (gap < cfg.minGap || gap > cfg.maxGap) {
        this.start(h);
        return true;
      }
      this.extend(h, gap, 1);
      return true;
    }
    const p = this.period();
    const k = Math.max(1, Math.round(gap / p));
    if (k <= (this.flagged ? 1 + cfg.maxMissed : 1) && Math.abs(gap - k * p) <= cfg.tolerance * p) {
      this.extend(h, gap, k);
      return !h.excused;
    }
    // Early: a spike between stalls. While a finding is open, anything off its period is noise.
    if (this.flagged || h.excused || gap < p * (1 - cfg.tolerance)) return false;
    // Late: the period broke; the last stall and this one may start another.
    const last = this.last;
    this.start(last);
    if (gap < cfg.minGap || gap > cfg.maxGap) this.start(h);
    else this.extend(h, gap, 1);
    return true;
  }

  private start(h: StallHit): void {
    this.first = h;
    this.last = h;
    this.hits = 0;
    this.gapSteps = 0;
    this.periods = 0;
    this.stallSum = 0;
    this.stallMin = Number.POSITIVE_INFINITY;
    this.stallMax = 0;
    this.savedSum = 0;
    this.inCompute = 0;
    if (!h.excused) this.count(h);
  }

  private extend(h: StallHit, gap: number, periods: number): void {
    this.last = h;
    this.gapSteps += gap;
    this.periods += periods;
    if (h.excused) return;
    this.savedSum += h.savedMs;
    this.count(h);
  }

  private count(h: StallHit): void {
    this.hits++;
    this.stallSum += h.stallMs;
    if (h.stallMs < this.stallMin) this.stallMin = h.stallMs;
    if (h.stallMs > this.stallMax) this.stallMax = h.stallMs;
    if (h.inCompute) this.inCompute++;
  }
}
