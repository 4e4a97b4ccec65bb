/**
 * The edge reduction: per-operation collective records (NCCL Inspector reports every one) →
 * one `collective` event per rank, step, communicator and op (p2p: and peer), with the count,
 * summed bytes and duration, the slowest operation, the mean reported bus bandwidth and the last
 * sequence number. A 100k-GPU job cannot ship every operation; it can ship this.
 *
 * Who and when, never guessed:
 * - The rank: `RankMap` maps the record's (host, pid) (or host and GPU) to (job, global rank). A
 *   record it cannot map waits `holdMs` for the hook's first step or a readable environment,
 *   then is dropped, counted `unmapped_pid`.
 * - The step: the rank's own step boundaries (the hook's step events): a record belongs to the
 *   first step of its rank that ends at or after it, i.e. step N's window is (end of N−1, end of
 *   N]; when N−1 is unknown, N's window starts at its end minus its step_ms. Records before a
 *   rank's first known window, or between windows of non-consecutive steps, are dropped
 *   (`outside_steps`); records of a step already sent, `late`.
 * - A step is sent `settleMs` after its boundary arrives (the dump lag of late records). While a
 *   step runs longer than `openEveryMs` (a long step, or a hang), a cumulative snapshot of it is
 *   sent every `openEveryMs` with `window: 'open'` (the hang detector reads seq progress there; the
 *   slow-link detector skips it).
 * - A rank with no step boundary at all `holdMs` after its first record (no hook runs there) is
 *   reduced per reporting interval instead: `window: 'interval'`, step = floor(ts / intervalMs).
 *
 * Memory: one accumulator per (rank, communicator, op[, peer]) for each step not yet sent (a
 * couple at a time), plus the raw records of the step still running (its boundary is not known
 * yet, so they cannot be summed into it), at most `maxHeld` in all (oldest dropped, `held_full`).
 */
import type { CollectiveEvent } from '../schema/events.js';
import type { InspectorOp } from './parsers/nccl_inspector.js';
import type { RankIdentity, RankMap, StepBoundary } from './ranks.js';

export interface ReducerOptions {
  ranks: RankMap;
  emit(events: CollectiveEvent[]): void;
  /** Records dropped, by reason; `detail` says why for the log (first few). */
  drop(reason: DropReason, n: number, detail?: string): void;
  holdMs: number;
  settleMs: number;
  openEveryMs: number;
  intervalMs: number;
  /** A step still unended this long after its first record drops them (`no_step`): the hook stopped. */
  maxStepMs: number;
  maxHeld: number;
  now(): number;
}

export type DropReason = 'unmapped_pid' | 'outside_steps' | 'late' | 'no_step' | 'held_full';

export const REDUCER_DEFAULTS = {
  holdMs: 60_000,
  settleMs: 3000,
  openEveryMs: 15_000,
  intervalMs: 10_000,
  maxStepMs: 600_000,
  maxHeld: 200_000,
};

interface Held extends InspectorOp {
  /** When the collector read it (its clock). */
  at: number;
}

interface Acc {
  op: CollectiveEvent['op'];
  comm: string;
  commName?: string;
  nranks: number;
  peer?: number;
  /** This rank's own rank in the communicator (sent with a peer named by its communicator rank). */
  commRank: number;
  count: number;
  bytes: number;
  durUs: number;
  maxUs: number;
  busSum: number;
  busN: number;
  seq: number;
  lastT: number;
}

interface Window {
  deadline: number;
  accs: Map<string, Acc>;
}

interface RankState {
  id: RankIdentity;
  /** Records after the rank's last known step end: the step still running. */
  pending: Held[];
  /** Steps whose boundary is known, not sent yet (sent at their deadline). */
  closing: Map<number, Window>;
  intervals: Map<number, Window>;
  sentThrough: number;
  firstAt: number;
  lastAt: number;
  lastOpenAt: number;
  /** Records of the running step at its last snapshot: an unchanged step is not sent again. */
  openCount: number;
}

const MAX_COMMS = 4096;
const IDLE_MS = 600_000;

export class CollectiveReducer {
  private readonly states = new Map<string, RankState>();
  private readonly unmapped = new Map<string, { recs: Held[]; firstAt: number }>();
  /** Communicator members seen, for naming a p2p peer's global rank: comm → comm rank → identity. */
  private readonly members = new Map<string, Map<number, RankIdentity>>();
  private held = 0;
  private readonly offs: (() => void)[];

  constructor(private readonly o: ReducerOptions) {
    this.offs = [
      o.ranks.onStep((id, b) => this.onBoundary(id, b)),
      o.ranks.onRemap((was, id) => this.remap(was, id)),
    ];
  }

  /** What is held now: records waiting for a mapping or their step's end, ranks, step and interval windows. */
  stats(): { held: number; ranks: number; windows: number } {
    let windows = 0;
    for (const st of this.states.values()) windows += st.closing.size + st.intervals.size;
    return { held: this.held, ranks: this.states.size, windows };
  }

  add(rec: InspectorOp, now: number): void {
    const h = rec as Held;
    h.at = now;
    if (this.held >= this.o.maxHeld) this.shed();
    const id = this.identity(h, now);
    if (!id) {
      const k = whoKey(h);
      let u = this.unmapped.get(k);
      if (!u) {
        u = { recs: [], firstAt: now };
        this.unmapped.set(k, u);
      }
      u.recs.push(h);
      this.held++;
      return;
    }
    this.place(this.state(id, now), h, now);
  }

  /** Moves time on: mappings retried, steps and intervals sent at their deadline, snapshots of long steps. */
  tick(now: number): void {
    for (const [k, u] of this.unmapped) {
      const id = this.identity(u.recs[0], now);
      if (id) {
        this.unmapped.delete(k);
        this.held -= u.recs.length;
        const st = this.state(id, now);
        for (const r of u.recs) this.place(st, r, now);
      } else if (now - u.firstAt >= this.o.holdMs) {
        this.unmapped.delete(k);
        this.held -= u.recs.length;
        const r = u.recs[0];
        this.o.drop(
          'unmapped_pid',
          u.recs.length,
          this.o.ranks.whyUnmapped(r.host, r.pid ?? -1) + gpuNote(r),
        );
      }
    }
    const out: CollectiveEvent[] = [];
    for (const [k, st] of this.states) {
      this.sendDue(st, now, out);
      const bs = this.o.ranks.boundaries(st.id.job, st.id.rank);
      if (st.pending.length > 0) {
        if (bs.length === 0 && now - st.firstAt >= this.o.holdMs) {
          // No hook runs for this rank: report per interval rather than never.
          const recs = st.pending;
          st.pending = [];
          this.held -= recs.length;
          for (const r of recs) this.toInterval(st, r, now);
        } else if (bs.length > 0) this.snapshotOrExpire(st, bs[bs.length - 1], now, out);
      }
      if (
        st.pending.length === 0 &&
        st.closing.size === 0 &&
        st.intervals.size === 0 &&
        now - st.lastAt > IDLE_MS
      )
        this.states.delete(k);
    }
    if (out.length) this.o.emit(out);
  }

  /**
   * At stop: sends every step and interval whose records are here, and the step still running as
   * an open snapshot (an interval for a rank with no step boundaries); unmapped records are dropped
   * with their reason.
   */
  flush(now: number): void {
    const out: CollectiveEvent[] = [];
    for (const st of this.states.values()) {
      this.sendDue(st, Number.POSITIVE_INFINITY, out);
      const bs = this.o.ranks.boundaries(st.id.job, st.id.rank);
      if (st.pending.length && bs.length > 0) {
        st.lastOpenAt = Number.NEGATIVE_INFINITY;
        st.openCount = 0;
        this.snapshot(st, bs[bs.length - 1], now, out);
      } else for (const r of st.pending) this.toInterval(st, r, now);
      this.held -= st.pending.length;
      st.pending = [];
      this.sendDue(st, Number.POSITIVE_INFINITY, out);
    }
    for (const u of this.unmapped.values()) {
      const r = u.recs[0];
      this.o.drop('unmapped_pid', u.recs.length, this.o.ranks.whyUnmapped(r.host, r.pid ?? -1) + gpuNote(r));
      this.held -= u.recs.length;
    }
    this.unmapped.clear();
    if (out.length) this.o.emit(out);
  }

  close(): void {
    for (const off of this.offs) off();
  }

  private identity(r: InspectorOp, now: number): RankIdentity | undefined {
    if (r.pid !== undefined) return this.o.ranks.lookup(r.host, r.pid, now);
    if (r.gpu !== undefined) return this.o.ranks.ownerOfGpu(r.host, r.gpu);
    return undefined;
  }

  private state(id: RankIdentity, now: number): RankState {
    const k = `${id.job}\u0000${id.rank}`;
    let st = this.states.get(k);
    if (!st) {
      st = {
        id,
        pending: [],
        closing: new Map(),
        intervals: new Map(),
        sentThrough: Number.NEGATIVE_INFINITY,
        firstAt: now,
        lastAt: now,
        lastOpenAt: 0,
        openCount: 0,
      };
      this.states.set(k, st);
    }
    st.id = id;
    st.lastAt = now;
    return st;
  }

  /** A mapped record into its step, or held until its step's end is known. */
  private place(st: RankState, r: Held, now: number): void {
    this.member(r, st.id);
    const bs = this.o.ranks.boundaries(st.id.job, st.id.rank);
    if (bs.length === 0 && st.intervals.size > 0) {
      this.toInterval(st, r, now);
      return;
    }
    if (bs.length === 0 || r.tMs > bs[bs.length - 1].endMs) {
      st.pending.push(r);
      this.held++;
      return;
    }
    const step = stepOf(bs, r.tMs);
    if (step === undefined || step <= st.sentThrough) {
      this.o.drop(step === undefined ? 'outside_steps' : 'late', 1);
      return;
    }
    let w = st.closing.get(step);
    if (!w) {
      w = { deadline: now + this.o.settleMs, accs: new Map() };
      st.closing.set(step, w);
    }
    accumulate(w.accs, r);
  }

  /** A new step end of a rank: its held records that ended by then go into their steps. */
  private onBoundary(id: RankIdentity, b: StepBoundary): void {
    const st = this.states.get(`${id.job}\u0000${id.rank}`);
    if (!st || st.pending.length === 0) return;
    const now = this.o.now();
    const still: Held[] = [];
    const ready: Held[] = [];
    for (const r of st.pending) (r.tMs <= b.endMs ? ready : still).push(r);
    if (ready.length === 0) return;
    st.pending = still;
    this.held -= ready.length;
    st.openCount = 0;
    for (const r of ready) this.place(st, r, now);
  }

  /** The hook named a process the environment had named otherwise: its waiting records follow the hook's rank. */
  private remap(was: RankIdentity, id: RankIdentity): void {
    const old = this.states.get(`${was.job}\u0000${was.rank}`);
    if (!old || old.pending.length === 0) return;
    const now = this.o.now();
    const recs = old.pending;
    old.pending = [];
    this.held -= recs.length;
    const st = this.state(id, now);
    for (const r of recs) this.place(st, r, now);
  }

  private sendDue(st: RankState, now: number, out: CollectiveEvent[]): void {
    if (st.closing.size) {
      const due = [...st.closing.entries()].filter(([, w]) => w.deadline <= now).sort(([a], [b]) => a - b);
      for (const [step, w] of due) {
        st.closing.delete(step);
        for (const acc of w.accs.values()) out.push(this.event(st.id, step, acc));
        if (step > st.sentThrough) st.sentThrough = step;
      }
    }
    if (st.intervals.size) {
      for (const [n, w] of st.intervals) {
        if (w.deadline > now) continue;
        st.intervals.delete(n);
        for (const acc of w.accs.values()) out.push(this.event(st.id, n, acc, 'interval'));
      }
    }
  }

  /** The step still running: snapshots while it lasts past openEveryMs; its records dropped past maxStepMs. */
  private snapshotOrExpire(st: RankState, last: StepBoundary, now: number, out: CollectiveEvent[]): void {
    const oldest = st.pending[0].at;
    if (now - oldest >= this.o.maxStepMs) {
      const cut = st.pending.findIndex((r) => now - r.at < this.o.maxStepMs);
      const n = cut < 0 ? st.pending.length : cut;
      st.pending.splice(0, n);
      this.held -= n;
      this.o.drop(
        'no_step',
        n,
        `rank ${st.id.rank} of ${st.id.job}: no step ended for ${Math.round(this.o.maxStepMs / 1000)} s`,
      );
      return;
    }
    if (now - oldest < this.o.openEveryMs) return;
    this.snapshot(st, last, now, out);
  }

  /** A cumulative snapshot of the step still running (at most every openEveryMs, and only when it changed). */
  private snapshot(st: RankState, last: StepBoundary, now: number, out: CollectiveEvent[]): void {
    if (now - st.lastOpenAt < this.o.openEveryMs || st.pending.length === st.openCount) return;
    st.lastOpenAt = now;
    st.openCount = st.pending.length;
    const accs = new Map<string, Acc>();
    for (const r of st.pending) accumulate(accs, r);
    for (const acc of accs.values()) out.push(this.event(st.id, last.step + 1, acc, 'open'));
  }

  private toInterval(st: RankState, r: Held, now: number): void {
    const n = Math.floor(r.tMs / this.o.intervalMs);
    let w = st.intervals.get(n);
    if (!w) {
      // Live, an interval is sent once it is over (plus the dump lag); a file read late, at once.
      w = { deadline: Math.max((n + 1) * this.o.intervalMs, now) + this.o.settleMs, accs: new Map() };
      st.intervals.set(n, w);
    }
    accumulate(w.accs, r);
  }

  private member(r: InspectorOp, id: RankIdentity): void {
    let m = this.members.get(r.comm);
    if (!m) {
      if (this.members.size >= MAX_COMMS) this.members.delete(this.members.keys().next().value as string);
      m = new Map();
      this.members.set(r.comm, m);
    }
    if (m.get(r.commRank) !== id) m.set(r.commRank, id);
  }

  /** Over `maxHeld`: the oldest records of the step still running of the fullest rank go first. */
  private shed(): void {
    let worst: Held[] | undefined;
    for (const st of this.states.values()) if (!worst || st.pending.length > worst.length) worst = st.pending;
    for (const u of this.unmapped.values()) if (!worst || u.recs.length > worst.length) worst = u.recs;
    if (!worst || worst.length === 0) return;
    const n = Math.max(1, Math.ceil(worst.length / 10));
    worst.splice(0, n);
    this.held -= n;
    this.o.drop('held_full', n);
  }

  private event(id: RankIdentity, step: number, a: Acc, window?: 'open' | 'interval'): CollectiveEvent {
    const e: CollectiveEvent & Record<string, unknown> = {
      v: 1,
      kind: 'collective',
      ts: Math.round(a.lastT),
      job: id.job,
      rank: id.rank,
      host: id.host,
      ...(id.gpu !== undefined ? { gpu: id.gpu } : {}),
      step,
      op: a.op,
      comm: a.comm,
      nranks: a.nranks,
      bytes: a.bytes,
      dur_ms: us(a.durUs),
      count: a.count,
      max_ms: us(a.maxUs),
      seq: a.seq,
    };
    if (a.busN > 0) e.busbw_gbs = Math.round((a.busSum / a.busN) * 1000) / 1000;
    if (a.commName) e.comm_name = a.commName;
    if (a.peer !== undefined) {
      const peer = this.members.get(a.comm)?.get(a.peer);
      if (peer && peer.job === id.job) {
        e.peer = peer.rank;
        e.peer_host = peer.host;
      } else {
        // The peer runs where this collector cannot see (another node): named by its rank in the
        // communicator, and this rank by its own, so the peer's events name both ends centrally.
        e.peer_comm_rank = a.peer;
        e.comm_rank = a.commRank;
      }
    }
    if (window) e.window = window;
    if (window === 'interval') e.interval_ms = this.o.intervalMs;
    return e;
  }
}

/** The step whose window holds t (boundaries in time order), or undefined before or between them. */
export function stepOf(bs: readonly StepBoundary[], t: number): number | undefined {
  for (let i = bs.length - 1; i >= 0; i--) {
    const b = bs[i];
    // After this end: between it and the next window, which starts later (a step went unreported).
    if (t > b.endMs) return undefined;
    const prev = bs[i - 1];
    const start = prev && prev.step === b.step - 1 ? prev.endMs : b.endMs - b.stepMs;
    if (t > start) return b.step;
  }
  return undefined;
}

function accumulate(accs: Map<string, Acc>, r: InspectorOp): void {
  const k = r.peer === undefined ? `${r.comm}\u0000${r.op}` : `${r.comm}\u0000${r.op}\u0000${r.peer}`;
  let a = accs.get(k);
  if (!a) {
    a = {
      op: r.op,
      comm: r.comm,
      nranks: r.nranks,
      commRank: r.commRank,
      count: 0,
      bytes: 0,
      durUs: 0,
      maxUs: 0,
      busSum: 0,
      busN: 0,
      seq: r.seq,
      lastT: r.tMs,
    };
    if (r.commName) a.commName = r.commName;
    if (r.peer !== undefined) a.peer = r.peer;
    accs.set(k, a);
  }
  a.count++;
  a.bytes += r.bytes;
  a.durUs += r.execUs;
  if (r.execUs > a.maxUs) a.maxUs = r.execUs;
  if (r.busbwGbs !== undefined) {
    a.busSum += r.busbwGbs;
    a.busN++;
  }
  if (r.seq > a.seq) a.seq = r.seq;
  if (r.tMs > a.lastT) a.lastT = r.tMs;
}

const us = (x: number) => Math.round(x) / 1000;
const whoKey = (r: InspectorOp) =>
  r.pid !== undefined ? `${r.host}\u0000p${r.pid}` : `${r.host}\u0000g${r.gpu}`;
const gpuNote = (r: InspectorOp) =>
  r.pid === undefined ? ` (GPU${r.gpu}: no step event from this GPU yet)` : '';
