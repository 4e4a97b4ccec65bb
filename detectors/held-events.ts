/**
 * A sharded job's held events (detectors/job-stage.ts), given back in event-time order (ties in
 * the order they came). Its steps come from several shards, each a delivery of many steps of its
 * own host groups at a time (detectors/shard-forward.ts): handed on in the order they came, one
 * group's later steps would reach the step assembler before another's earlier ones, which then
 * closes frames early (`latenessMs`, `maxOpenSteps`) with part of their ranks. In event time, they
 * reach it as a recorded stream (replay) gives them.
 *
 * A binary heap over parallel arrays (no object per held event). It also keeps, per partition,
 * how many held events each offset has and when (wall clock) each was held, so the lowest offset
 * held (commits stop there) and the longest wait are read without a walk over what is held.
 */
import type { RankwatchEvent } from '../schema/events.js';

export class HeldEvents {
  private events: RankwatchEvent[] = [];
  private seqs: number[] = [];
  private ats: number[] = [];
  private offsets: number[] = [];
  private froms: string[] = [];
  /** Whether each was read live (not replayed by a new owner): its output must come out. */
  private lives: boolean[] = [];
  private seq = 0;
  /** Whether the event `pop()` took out last was read live. */
  poppedLive = false;
  /** Per partition, held events per offset. */
  private readonly byOffset = new Map<string, Map<number, number>>();
  /** Held events per wall-clock time they came, in the order they came (times only rise). */
  private readonly byArrival = new Map<number, number>();

  get size(): number {
    return this.events.length;
  }

  /** The earliest held event (event time), or undefined. */
  top(): RankwatchEvent | undefined {
    return this.events[0];
  }

  push(e: RankwatchEvent, at: number, from: string, offset: number, live: boolean): void {
    let i = this.events.length;
    this.events.push(e);
    this.lives.push(live);
    this.seqs.push(this.seq++);
    this.ats.push(at);
    this.offsets.push(offset);
    this.froms.push(from);
    count(this.byArrival, at, 1);
    let o = this.byOffset.get(from);
    if (!o) {
      o = new Map();
      this.byOffset.set(from, o);
    }
    count(o, offset, 1);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.before(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }

  /** Takes the earliest held event out. */
  pop(): RankwatchEvent {
    const e = this.events[0];
    this.poppedLive = this.lives[0];
    count(this.byArrival, this.ats[0], -1);
    const o = this.byOffset.get(this.froms[0])!;
    count(o, this.offsets[0], -1);
    if (o.size === 0) this.byOffset.delete(this.froms[0]);
    const last = this.events.length - 1;
    this.swap(0, last);
    this.events.pop();
    this.seqs.pop();
    this.ats.pop();
    this.offsets.pop();
    this.froms.pop();
    this.lives.pop();
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= last) break;
      const m = l + 1 < last && this.before(l + 1, l) ? l + 1 : l;
      if (!this.before(m, i)) break;
      this.swap(i, m);
      i = m;
    }
    return e;
  }

  /** When (wall clock) the longest-held event came, or undefined. */
  oldestArrival(): number | undefined {
    for (const at of this.byArrival.keys()) return at;
    return undefined;
  }

  /** Per `topic/partition`, the lowest offset held, into `from` where lower than what it has. */
  lowestOffsets(from: Map<string, number>): void {
    for (const [p, offsets] of this.byOffset) {
      let low = from.get(p) ?? Number.POSITIVE_INFINITY;
      for (const offset of offsets.keys()) if (offset < low) low = offset;
      from.set(p, low);
    }
  }

  private before(a: number, b: number): boolean {
    const ta = this.events[a].ts;
    const tb = this.events[b].ts;
    return ta < tb || (ta === tb && this.seqs[a] < this.seqs[b]);
  }

  private swap(a: number, b: number): void {
    if (a === b) return;
    swapIn(this.events, a, b);
    swapIn(this.seqs, a, b);
    swapIn(this.ats, a, b);
    swapIn(this.offsets, a, b);
    swapIn(this.froms, a, b);
    swapIn(this.lives, a, b);
  }
}

function swapIn<T>(xs: T[], a: number, b: number): void {
  const t = xs[a];
  xs[a] = xs[b];
  xs[b] = t;
}

function count<K>(m: Map<K, number>, k: K, by: number): void {
  const n = (m.get(k) ?? 0) + by;
  if (n === 0) m.delete(k);
  else m.set(k, n);
}
