/**
 * The chronic question: a GPU slower than its peers from the start (its own level, not a change)
 * costs the job only while it is the rank every step waits for. Synchronous training waits for its
 * slowest rank, so replacing that GPU with a typical one buys the job its lead over the next
 * slowest rank (in its stage, or in another stage when that one is slower), not its distance to
 * the median; replacing any other GPU buys nothing while the slowest remains.
 *
 * Per step the detector names the slowest rank (by de-spiked compute: each rank's value capped a
 * few of its own noise units above its own level, so a checkpoint written inside rank 0's step or a
 * GC pause is not a lead) and what the job would have saved without it. Here those savings become
 * each GPU's share of the job's wall time, over an exponentially weighted window: O(1) per step
 * (only the slowest rank's figure changes; the others decay lazily when read) and O(1) per rank.
 */
import { grown } from '../arrays.js';

export class ChronicCost {
  /** Each rank's weighted sum of the milliseconds it cost, as of frame `at`. */
  private saved = new Float64Array(0);
  private at = new Int32Array(0);
  /** The weighted sum of the wall step time, as of the current frame. */
  private wall = 0;
  private frame = 0;
  /** Steps measured since the job started (or restarted). */
  steps = 0;
  private readonly keep: number;

  constructor(lambda: number) {
    this.keep = 1 - lambda;
  }

  ensure(capacity: number): void {
    this.saved = grown(this.saved, capacity);
    this.at = grown(this.at, capacity);
  }

  /** One step: its wall time, and the milliseconds the job would have saved without rank `top` (-1: none). */
  step(stepMs: number, top: number, savedMs: number): void {
    this.frame++;
    this.steps++;
    this.wall = this.wall * this.keep + stepMs;
    if (top >= 0 && savedMs > 0) {
      this.saved[top] = this.weighted(top) + savedMs;
      this.at[top] = this.frame;
    }
  }

  /** Share of the job's wall time rank r costs, percent (what replacing its GPU would buy). */
  sharePct(r: number): number {
    return this.wall > 0 ? (100 * this.weighted(r)) / this.wall : 0;
  }

  reset(): void {
    this.saved.fill(0);
    this.at.fill(0);
    this.wall = 0;
    this.frame = 0;
    this.steps = 0;
  }

  private weighted(r: number): number {
    const s = this.saved[r];
    return s === 0 ? 0 : s * this.keep ** (this.frame - this.at[r]);
  }
}
