/**
 * One step's communicators and p2p edges ("links") as columns, until the step is judged. A step
 * has about one link per rank; as objects (two dozen fields, six of them boxed numbers) they cost
 * ~300 bytes each, lived across many young-generation collections and died in the old space every
 * step. A table here costs ~120 bytes a link and is reused, emptied, by a later step.
 */
import { grown } from '../arrays.js';

/** A link's kind: a job has a handful, built once (see SlowLinkDetector.kindOf). */
export interface LinkKind {
  family: string;
  nranks: number;
  band: number;
  kind: string;
  /** The kind when every member is on one host (compared with NVLink groups only). */
  kindNvlink: string;
}

export class StepLinks {
  size = 0;
  /** Shortest duration a member reported: the one that arrived last waited for nobody. */
  durMin = new Float64Array(0);
  bytes = new Float64Array(0);
  /** nccl-tests' bus-bandwidth factor of the link's op and size. */
  factor = new Float64Array(0);
  /** Set when judged: score, bandwidth measured and expected, time lost. */
  z = new Float64Array(0);
  measured = new Float64Array(0);
  expected = new Float64Array(0);
  excessMs = new Float64Array(0);
  /** 1 for a collective (rails in `rails`), 0 for a p2p edge (rails `src` and `dst`). */
  coll = new Uint8Array(0);
  src = new Int32Array(0);
  dst = new Int32Array(0);
  /** The judge pass that last counted this link. */
  mark = new Int32Array(0);
  /** p2p: the receiving rank, the next edge of the same sender this step (-1 at the end), and the edge's row (-1: none yet). */
  to = new Int32Array(0);
  next = new Int32Array(0);
  row = new Int32Array(0);
  /** p2p without a row, during a judge pass: the link its edge is judged by, and the next new edge of the same sending rail (-1: none). */
  win = new Int32Array(0);
  nextNew = new Int32Array(0);
  kind: LinkKind[] = [];
  /** `op:comm` for a collective (a p2p edge's key is its rail pair, from src and dst). */
  key: (string | undefined)[] = [];
  /** A collective's rails; the Sets stay with their slot and are emptied for reuse. */
  rails: (Set<number> | undefined)[] = [];
  /** For a collective whose members are all on one host: its `nvlink:` key (set by judge). */
  intra: (string | undefined)[] = [];

  /** A new link with every column reset; returns its index. */
  add(kind: LinkKind, bytes: number, factor: number, collective: boolean, src: number, dst: number): number {
    if (this.size === this.durMin.length) this.grow(Math.max(256, Math.ceil(this.size * 1.5)));
    const i = this.size++;
    this.durMin[i] = Number.POSITIVE_INFINITY;
    this.bytes[i] = bytes;
    this.factor[i] = factor;
    this.z[i] = 0;
    this.measured[i] = 0;
    this.expected[i] = 0;
    this.excessMs[i] = 0;
    this.coll[i] = collective ? 1 : 0;
    this.src[i] = src;
    this.dst[i] = dst;
    this.mark[i] = 0;
    this.to[i] = -1;
    this.next[i] = -1;
    this.row[i] = -1;
    this.win[i] = -1;
    this.nextNew[i] = -1;
    this.kind[i] = kind;
    this.key[i] = undefined;
    this.intra[i] = undefined;
    if (collective) {
      const rails = this.rails[i];
      if (rails) rails.clear();
      else this.rails[i] = new Set();
    }
    return i;
  }

  /** Empties the table for another step, keeping its capacity. */
  reset(): void {
    // Strings of the last step are let go now, not when a later link overwrites their slot.
    this.key.fill(undefined, 0, this.size);
    this.intra.fill(undefined, 0, this.size);
    this.size = 0;
  }

  private grow(c: number): void {
    this.durMin = grown(this.durMin, c);
    this.bytes = grown(this.bytes, c);
    this.factor = grown(this.factor, c);
    this.z = grown(this.z, c);
    this.measured = grown(this.measured, c);
    this.expected = grown(this.expected, c);
    this.excessMs = grown(this.excessMs, c);
    this.coll = grown(this.coll, c);
    this.src = grown(this.src, c);
    this.dst = grown(this.dst, c);
    this.mark = grown(this.mark, c);
    this.to = grown(this.to, c);
    this.next = grown(this.next, c);
    this.row = grown(this.row, c);
    this.win = grown(this.win, c);
    this.nextNew = grown(this.nextNew, c);
  }

  hasRail(l: number, rail: number): boolean {
    return this.coll[l] ? this.rails[l]!.has(rail) : this.src[l] === rail || this.dst[l] === rail;
  }

  railCount(l: number): number {
    return this.coll[l] ? this.rails[l]!.size : this.src[l] === this.dst[l] ? 1 : 2;
  }

  sharesRail(a: number, b: number): boolean {
    const [small, large] = this.railCount(a) <= this.railCount(b) ? [a, b] : [b, a];
    if (!this.coll[small])
      return this.hasRail(large, this.src[small]) || this.hasRail(large, this.dst[small]);
    for (const r of this.rails[small]!) if (this.hasRail(large, r)) return true;
    return false;
  }
}
