/**
 * Each rank's own baseline of its peer-relative log ratio (log compute − its stage's median): its
 * level and its noise, so that a change is judged against the rank's own past in units of its own
 * noise, and a GPU's fixed offset from its peers (silicon, cooling) cancels.
 *
 * Steps are taken in blocks of LEVEL_BLOCK. A block's trimmed mean and standard deviation (its
 * highest and lowest value left out: a spike, a checkpoint written inside rank 0's step, cannot move
 * them; for Gaussian noise the mean is 97% as efficient as the plain one) are folded in one block
 * late, so a shift under test is not in its own reference for 16–32 steps. The level is the running
 * mean of the blocks' trimmed means, then a slow EWMA (weight `lambda` per step); the noise is the
 * same mean of the blocks' trimmed standard deviations. A block during which the rank rose well above its level (the detector
 * says so: `hold`), or any block while the rank is flagged, is left out: a fault never becomes the
 * reference it is measured against. O(1) state per rank: a block's running sums, least and most,
 * and a dozen figures (no values kept).
 */
import { grown } from '../arrays.js';

/** Steps per block. */
export const LEVEL_BLOCK = 16;
/**
 * Variance of the trimmed mean of 16 normal values (highest and lowest left out), in σ²/16 (Monte
 * Carlo, 4·10⁵ blocks): a level from n steps has variance LEVEL_VAR·σ²/n, as a mean of n / LEVEL_VAR
 * steps would.
 */
export const LEVEL_VAR = 1.033;
/**
 * E[trimmed standard deviation] of 16 normal values (highest and lowest left out, 13 degrees of
 * freedom) is 0.781 σ, and one block's is off by 20.7% of itself (Monte Carlo, 4·10⁵ blocks).
 */
const TRIMMED_SD_TO_SIGMA = 1 / 0.781;
const BLOCK_NOISE_SD = 0.207;
/** A block with fewer values than this (a rank that missed steps) moves the level, not the noise. */
const MIN_NOISE_VALUES = 8;

export class RankBaselines {
  private cap = 0;
  /** The block being filled: its sum, sum of squares, least and most value, and count. */
  private blockSum = new Float64Array(0);
  private blockSq = new Float64Array(0);
  private blockMin = new Float32Array(0);
  private blockMax = new Float32Array(0);
  private blockN = new Uint8Array(0);
  private blockHeld = new Uint8Array(0);
  /** The last complete block, waiting one block to be folded in. */
  private pendMean = new Float64Array(0);
  private pendNoise = new Float64Array(0);
  private pendN = new Uint8Array(0);
  private pendHeld = new Uint8Array(0);
  /** Steps the level has taken in, and blocks the noise has. */
  n = new Int32Array(0);
  level = new Float64Array(0);
  noise = new Float64Array(0);
  private noiseBlocks = new Int32Array(0);

  constructor(private readonly lambda: number) {}

  ensure(capacity: number): void {
    if (capacity <= this.cap) return;
    this.blockSum = grown(this.blockSum, capacity);
    this.blockSq = grown(this.blockSq, capacity);
    this.blockMin = grown(this.blockMin, capacity);
    this.blockMax = grown(this.blockMax, capacity);
    this.blockN = grown(this.blockN, capacity);
    this.blockHeld = grown(this.blockHeld, capacity);
    this.pendMean = grown(this.pendMean, capacity);
    this.pendNoise = grown(this.pendNoise, capacity);
    this.pendN = grown(this.pendN, capacity);
    this.pendHeld = grown(this.pendHeld, capacity);
    this.n = grown(this.n, capacity);
    this.level = grown(this.level, capacity);
    this.noise = grown(this.noise, capacity);
    this.noiseBlocks = grown(this.noiseBlocks, capacity);
    this.cap = capacity;
  }

  /** Whether the rank has a level: folded in, or its first block's, until that is folded in. */
  hasLevel(r: number): boolean {
    return this.n[r] > 0 || this.pendN[r] > 0;
  }

  /** Steps seen since the level started: in it, pending, and in the block being filled. */
  seen(r: number): number {
    return this.n[r] + this.pendN[r] + this.blockN[r];
  }

  /** Adds a step's value; `hold` leaves its block out of the level and noise. */
  add(r: number, x: number, hold: boolean): void {
    const i = this.blockN[r];
    if (i >= LEVEL_BLOCK) return; // a frame the fold did not close (cannot happen at one value per frame)
    if (i === 0) {
      this.blockSum[r] = x;
      this.blockSq[r] = x * x;
      this.blockMin[r] = x;
      this.blockMax[r] = x;
    } else {
      this.blockSum[r] += x;
      this.blockSq[r] += x * x;
      if (x < this.blockMin[r]) this.blockMin[r] = x;
      if (x > this.blockMax[r]) this.blockMax[r] = x;
    }
    this.blockN[r] = i + 1;
    if (hold) this.blockHeld[r] = 1;
  }

  /**
   * Folds the pending block into the level and noise (unless held), then makes the block just
   * filled the pending one. Returns its trimmed mean when it is the rank's first block (for anchoring
   * the fast EWMA; it is the level until folded in), NaN otherwise.
   */
  fold(r: number): number {
    const m = this.pendN[r];
    if (m > 0 && !this.pendHeld[r]) {
      this.n[r] += m;
      const n = this.n[r];
      const lb = this.lambda;
      const w = n * lb <= 1 ? m / n : 1 - (1 - lb) ** m;
      this.level[r] += w * (this.pendMean[r] - this.level[r]);
      if (m >= MIN_NOISE_VALUES) {
        const b = ++this.noiseBlocks[r];
        const wn = b * LEVEL_BLOCK * lb <= 1 ? 1 / b : 1 - (1 - lb) ** LEVEL_BLOCK;
        this.noise[r] += wn * (this.pendNoise[r] - this.noise[r]);
      }
    }
    const first = this.n[r] === 0 && m === 0;
    const k = this.blockN[r];
    let mean = Number.NaN;
    if (k > 0) {
      // Trimmed: the least and most value left out (not with fewer than 3 values).
      const lo = this.blockMin[r];
      const hi = this.blockMax[r];
      const t = k >= 3;
      const m = t ? k - 2 : k;
      mean = (t ? this.blockSum[r] - lo - hi : this.blockSum[r]) / m;
      const ss = (t ? this.blockSq[r] - lo * lo - hi * hi : this.blockSq[r]) - m * mean * mean;
      this.pendMean[r] = mean;
      this.pendNoise[r] = m > 1 ? TRIMMED_SD_TO_SIGMA * Math.sqrt(Math.max(0, ss) / (m - 1)) : 0;
    }
    this.pendN[r] = k;
    this.pendHeld[r] = this.blockHeld[r];
    this.blockN[r] = 0;
    this.blockHeld[r] = 0;
    // The first block is the level until it is folded in (as itself): the EWMA and the stage's
    // noise have a centre one block sooner.
    if (first && k > 0) this.level[r] = mean;
    return first ? mean : Number.NaN;
  }

  /**
   * The rank's own noise when it is clearly above `pool` (its stage's noise): above it by three of
   * the estimate's standard errors. With two, one rank in 40 took a noisy draw of its first blocks
   * for its noise at each fold and was judged in units too large. Otherwise 0, and the stage's
   * noise is the rank's unit: a young estimate that came out low must not shrink the unit and
   * inflate the rank's scores.
   */
  ownNoiseAbove(r: number, pool: number): number {
    const b = this.noiseBlocks[r];
    if (b === 0) return 0;
    // The EWMA's weight settles at ~LEVEL_BLOCK·λ per block: about (2 − w)/w blocks' worth.
    const w = 1 - (1 - this.lambda) ** LEVEL_BLOCK;
    const blocks = Math.min(b, (2 - w) / w);
    const own = this.noise[r];
    return own * (1 - (3 * BLOCK_NOISE_SD) / Math.sqrt(blocks)) > pool ? own : 0;
  }

  /** Sets a rank's level and noise (a GPU's, carried across a restart); `n` steps, `blocks` of noise. */
  set(r: number, level: number, n: number, noise: number, blocks: number): void {
    this.level[r] = level;
    this.n[r] = n;
    this.noise[r] = noise;
    this.noiseBlocks[r] = blocks;
  }

  /** The noise's block count (carried with the level across a restart). */
  blocks(r: number): number {
    return this.noiseBlocks[r];
  }

  /** Forgets every rank's baseline (a restart: what is carried is set again by GPU). */
  clear(): void {
    this.blockN.fill(0);
    this.blockHeld.fill(0);
    this.pendN.fill(0);
    this.pendHeld.fill(0);
    this.n.fill(0);
    this.level.fill(0);
    this.noise.fill(0);
    this.noiseBlocks.fill(0);
  }
}
