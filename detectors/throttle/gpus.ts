/**
 * The throttle detector's per-GPU state as columns, by GPU id. As an object per GPU (a dozen
 * fields, three of them boxed doubles, three added later into a property array) a 65,536-GPU fleet
 * held ~330,000 small objects that every collection walked; here it is a few arrays.
 */
import { grown } from '../arrays.js';

export class GpuTable {
  size = 0;
  /** The host's name (one string per host, shared by its GPUs) and the GPU's index on it. */
  host: string[] = [];
  gpu = new Int32Array(0);
  /** The job and rank it last reported (undefined and NaN before any). */
  job: (string | undefined)[] = [];
  rank = new Float64Array(0);
  /** The open throttle finding covering it, if any. */
  incident: (string | undefined)[] = [];
  lastTs = new Float64Array(0);
  /** Leaky count of bad samples, and when its run of bad samples began. */
  score = new Float64Array(0);
  runStartTs = new Float64Array(0);
  firing = new Uint8Array(0);
  /** Clean samples in a row at score 0. */
  clean = new Int32Array(0);
  /** Bad samples of the current run, their summed clock and reason bits. */
  badSamples = new Int32Array(0);
  clockSum = new Float64Array(0);
  reasons = new Int32Array(0);
  maxClock = new Float64Array(0);
  /** EWMA of the share of busy samples at the software power cap. */
  powerCap = new Float64Array(0);
  /** EWMA of the power drawn while busy, watts (0: no reading yet). */
  power = new Float64Array(0);

  add(host: string, gpu: number, ts: number): number {
    if (this.size === this.gpu.length) this.grow(Math.max(64, this.size * 2));
    const i = this.size++;
    this.host[i] = host;
    this.gpu[i] = gpu;
    this.job[i] = undefined;
    this.rank[i] = Number.NaN;
    this.incident[i] = undefined;
    this.lastTs[i] = -1;
    this.runStartTs[i] = ts;
    return i;
  }

  rankOf(i: number): number | undefined {
    return Number.isNaN(this.rank[i]) ? undefined : this.rank[i];
  }

  private grow(c: number): void {
    this.gpu = grown(this.gpu, c);
    this.rank = grown(this.rank, c);
    this.lastTs = grown(this.lastTs, c);
    this.score = grown(this.score, c);
    this.runStartTs = grown(this.runStartTs, c);
    this.firing = grown(this.firing, c);
    this.clean = grown(this.clean, c);
    this.badSamples = grown(this.badSamples, c);
    this.clockSum = grown(this.clockSum, c);
    this.reasons = grown(this.reasons, c);
    this.maxClock = grown(this.maxClock, c);
    this.powerCap = grown(this.powerCap, c);
    this.power = grown(this.power, c);
  }
}
