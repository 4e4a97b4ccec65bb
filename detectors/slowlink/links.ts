/**
 * One step's communicators and p2p edges ("links") as columns, until the step is judged. A step
 * has about one link per rank; as objects (two dozen fields, six of them boxed numbers) they cost
 * ~300 bytes each, lived across many young-generation collections and died in the old space every
 * step. A table here costs ~150 bytes a link and is reused, emptied, by a later step.
 *
 * A collective's member rails are a list in one pool per table, deduplicated through an
 * open-addressing set of (link, rail): a Set per collective was emptied and regrown every step
 * (a data-parallel group of 2,048 ranks rehashed 9 times a step, its tables promoted and dropped).
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
  /** A collective's member rails: first and last entry of its list in `memberRail` (-1: none), and how many. */
  memberHead = new Int32Array(0);
  memberTail = new Int32Array(0);
  memberCount = new Int32Array(0);
  /** Two order-free hashes of a collective's member rails: a sum and an xor of mixed rail ids. */
  memberSig = new Float64Array(0);
  memberMix = new Int32Array(0);
  /** A collective's `op:comm` id (the detector's). */
  collId = new Int32Array(0);
  /** Member entries of all collectives, in the order each rail first reported: its rail and the link's next entry. */
  memberRail = new Int32Array(1024);
  memberNext = new Int32Array(1024);
  private memberLink = new Int32Array(1024);
  private members = 0;
  /** (link, rail) pairs already listed: entry index + 1 by hash slot, 0 for empty (power-of-two size, at most half full). */
  private seen = new Int32Array(2048);
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
    this.memberHead[i] = -1;
    this.memberTail[i] = -1;
    this.memberCount[i] = 0;
    this.memberSig[i] = 0;
    this.memberMix[i] = 0;
    this.collId[i] = -1;
    return i;
  }

  /** Lists `rail` as a member of collective `l`, once however often it reports. */
  addRail(l: number, rail: number): void {
    const h = this.slotOf(l, rail);
    if (this.seen[h] !== 0) return;
    if (this.members === this.memberRail.length) {
      const c = this.members * 2;
      this.memberRail = grown(this.memberRail, c);
      this.memberNext = grown(this.memberNext, c);
      this.memberLink = grown(this.memberLink, c);
    }
    const m = this.members++;
    this.memberRail[m] = rail;
    this.memberLink[m] = l;
    this.memberNext[m] = -1;
    if (this.memberTail[l] >= 0) this.memberNext[this.memberTail[l]] = m;
    else this.memberHead[l] = m;
    this.memberTail[l] = m;
    this.memberCount[l]++;
    this.memberSig[l] += hashOf(rail, 0x5bd1e995);
    this.memberMix[l] ^= Math.imul(rail ^ 0x27d4eb2f, 0x165667b1);
    this.seen[h] = m + 1;
    if (this.members * 2 > this.seen.length) this.rehash(this.seen.length * 2);
  }

  private rehash(size: number): void {
    this.seen = new Int32Array(size);
    const mask = size - 1;
    for (let m = 0; m < this.members; m++) {
      let h = hashOf(this.memberLink[m], this.memberRail[m]) & mask;
      while (this.seen[h] !== 0) h = (h + 1) & mask;
      this.seen[h] = m + 1;
    }
  }

  /** The set's slot that holds (l, rail), or the empty one where it would go. */
  private slotOf(l: number, rail: number): number {
    const mask = this.seen.length - 1;
    let h = hashOf(l, rail) & mask;
    for (let m = this.seen[h] - 1; m >= 0; m = this.seen[h] - 1) {
      if (this.memberRail[m] === rail && this.memberLink[m] === l) return h;
      h = (h + 1) & mask;
    }
    return h;
  }

  /** Empties the table for another step, keeping its capacity. */
  reset(): void {
    // Strings of the last step are let go now, not when a later link overwrites their slot.
    this.key.fill(undefined, 0, this.size);
    this.intra.fill(undefined, 0, this.size);
    this.size = 0;
    // The pool and the set keep their capacity (the set is at most 4 entries per member of the largest step).
    this.seen.fill(0);
    this.members = 0;
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
    this.memberHead = grown(this.memberHead, c);
    this.memberTail = grown(this.memberTail, c);
    this.memberCount = grown(this.memberCount, c);
    this.memberSig = grown(this.memberSig, c);
    this.memberMix = grown(this.memberMix, c);
    this.collId = grown(this.collId, c);
  }

  hasRail(l: number, rail: number): boolean {
    return this.coll[l]
      ? this.seen[this.slotOf(l, rail)] !== 0
      : this.src[l] === rail || this.dst[l] === rail;
  }

  railCount(l: number): number {
    return this.coll[l] ? this.memberCount[l] : this.src[l] === this.dst[l] ? 1 : 2;
  }

  sharesRail(a: number, b: number): boolean {
    const [small, large] = this.railCount(a) <= this.railCount(b) ? [a, b] : [b, a];
    if (!this.coll[small])
      return this.hasRail(large, this.src[small]) || this.hasRail(large, this.dst[small]);
    for (let m = this.memberHead[small]; m >= 0; m = this.memberNext[m])
      if (this.hasRail(large, this.memberRail[m])) return true;
    return false;
  }
}

/** Hash of a (link, rail) pair, before masking to a slot. */
const hashOf = (l: number, rail: number): number => {
  const h = Math.imul(l, 0x9e3779b1) ^ Math.imul(rail, 0x85ebca77);
  return (h ^ (h >>> 16)) >>> 0;
};
