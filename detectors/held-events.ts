/**
 * A sharded job's held events (detectors/job-stage.ts), given back in event-time order (ties in
 * the order they came). Its steps come from several shards, each a delivery of many steps of its
 * own host groups at a time (detectors/shard-forward.ts): handed on in the order they came, one
 * group's later steps would reach the step assembler before another's earlier ones, which then
 * closes frames early (`latenessMs`, `maxOpenSteps`) with part of their ranks. In event time, they
 * reach it as a recorded stream (replay) gives them.
 *
 * A binary heap of slot numbers over slots in parallel arrays: a sift moves one number. A step a
 * shard passed on is held as its row of the record it came in (`pushRow`), made an event only when
 * it is taken out: a held event object lives until its step is complete in every host group, long
 * enough to be promoted, and the old generation's collector would walk one per rank and step; a
 * record's columns are a few arrays. It also keeps, per partition, how many held events each
 * offset has and when (wall clock) each was held, so the lowest offset held (commits stop there)
 * and the longest wait are read without a walk over what is held: counted per origin (where and
 * when a run of events was read, e.g. a record's rows), not per event.
 */
import type { RankwatchEvent } from '../schema/events.js';
import { type ShardSteps, stepAt } from './shard-forward.js';

/** Where and when (wall clock) held events were read, and how many of them are still held. */
interface Origin {
  at: number;
  from: string;
  offset: number;
  live: boolean;
  held: number;
}

export class HeldEvents {
  /** Slot numbers, a binary heap by event time, then by the order they came. */
  private heap: number[] = [];
  /** Per slot: an event, or the record and row of a step (`event` undefined). */
  private events: (RankwatchEvent | undefined)[] = [];
  private records: (ShardSteps | undefined)[] = [];
  private rows: number[] = [];
  private tss: number[] = [];
  private seqs: number[] = [];
  private origins: Origin[] = [];
  private free: number[] = [];
  /** The origin of the last event held: the next, read at the same place and time, shares it. */
  private last: Origin | undefined;
  private seq = 0;
  /** Whether the event `pop()` took out last was read live (not replayed by a new owner): its output must come out. */
  poppedLive = false;
  /** Per partition, held events per offset. */
  private readonly byOffset = new Map<string, Map<number, number>>();
  /** Held events per wall-clock time they came, in the order they came (times only rise). */
  private readonly byArrival = new Map<number, number>();

  get size(): number {
    return this.heap.length;
  }

  /** Event time of the earliest held event, or undefined. */
  topTs(): number | undefined {
    return this.heap.length === 0 ? undefined : this.tss[this.heap[0]];
  }

  /** The earliest held event's kind; only while one is held. */
  topKind(): RankwatchEvent['kind'] {
    return this.events[this.heap[0]]?.kind ?? 'step';
  }

  /** The earliest held event's step (NaN: not a step); only while one is held. */
  topStep(): number {
    const slot = this.heap[0];
    const e = this.events[slot];
    if (e === undefined) return this.records[slot]!.step[this.rows[slot]];
    return e.kind === 'step' ? e.step : Number.NaN;
  }

  push(e: RankwatchEvent, at: number, from: string, offset: number, live: boolean): void {
    this.hold(e, undefined, 0, e.ts, at, from, offset, live);
  }

  /** Row `row` of a steps record (checked: `stepRowOk`), held as it is. */
  pushRow(r: ShardSteps, row: number, at: number, from: string, offset: number, live: boolean): void {
    this.hold(undefined, r, row, r.ts[row], at, from, offset, live);
  }

  /** Takes the earliest held event out. */
  pop(): RankwatchEvent {
    const heap = this.heap;
    const slot = heap[0];
    const e = this.events[slot] ?? stepAt(this.records[slot]!, this.rows[slot]);
    const origin = this.origins[slot];
    this.poppedLive = origin.live;
    if (--origin.held === 0) {
      count(this.byArrival, origin.at, -1);
      const o = this.byOffset.get(origin.from)!;
      count(o, origin.offset, -1);
      if (o.size === 0) this.byOffset.delete(origin.from);
    }
    this.events[slot] = undefined;
    this.records[slot] = undefined;
    this.free.push(slot);
    const last = heap.pop()!;
    const n = heap.length;
    if (n === 0) return e;
    // Sift the last slot down from the root.
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const m = l + 1 < n && this.before(heap[l + 1], heap[l]) ? l + 1 : l;
      if (!this.before(heap[m], last)) break;
      heap[i] = heap[m];
      i = m;
    }
    heap[i] = last;
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

  private hold(
    e: RankwatchEvent | undefined,
    r: ShardSteps | undefined,
    row: number,
    ts: number,
    at: number,
    from: string,
    offset: number,
    live: boolean,
  ): void {
    let origin = this.last;
    if (
      origin === undefined ||
      origin.held === 0 ||
      origin.at !== at ||
      origin.offset !== offset ||
      origin.from !== from ||
      origin.live !== live
    ) {
      origin = { at, from, offset, live, held: 0 };
      this.last = origin;
      count(this.byArrival, at, 1);
      let o = this.byOffset.get(from);
      if (!o) {
        o = new Map();
        this.byOffset.set(from, o);
      }
      count(o, offset, 1);
    }
    origin.held++;
    let slot = this.free.pop();
    if (slot === undefined) {
      slot = this.tss.length;
      this.events.push(e);
      this.records.push(r);
      this.rows.push(row);
      this.tss.push(ts);
      this.seqs.push(this.seq++);
      this.origins.push(origin);
    } else {
      this.events[slot] = e;
      this.records[slot] = r;
      this.rows[slot] = row;
      this.tss[slot] = ts;
      this.seqs[slot] = this.seq++;
      this.origins[slot] = origin;
    }
    // Sift up from the end.
    const heap = this.heap;
    let i = heap.length;
    heap.push(slot);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.before(slot, heap[p])) break;
      heap[i] = heap[p];
      i = p;
    }
    heap[i] = slot;
  }

  /** Whether slot `a` comes before slot `b`. */
  private before(a: number, b: number): boolean {
    const ta = this.tss[a];
    const tb = this.tss[b];
    return ta < tb || (ta === tb && this.seqs[a] < this.seqs[b]);
  }
}

function count<K>(m: Map<K, number>, k: K, by: number): void {
  const n = (m.get(k) ?? 0) + by;
  if (n === 0) m.delete(k);
  else m.set(k, n);
}
