/**
 * The shard half of the slow-link detector (docs/operations.md, "Capacity"). A shard owns some
 * host groups of a job; per step it reduces their collective records to one record per
 * communicator (p2p: per edge): the shortest and longest duration its members reported, how many
 * reports, the bus bandwidth at the shortest, and the member ranks. The job stage merges the
 * shards' records (minimum of minima, members joined: `mergeReduced`) and hands them to the
 * judge (`toCollectives`), which sees what it would have built from the raw records.
 *
 * A group's step is sent once a record of a later step came from that group (records of a group
 * arrive in step order per rank), or at the end of input or when the bus is idle; each send is
 * followed by a mark, "group G of job J is complete through step S", which lets the job stage
 * release that step's events.
 */
import type { CollectiveEvent } from '../../schema/events.js';
import { busbwGBps } from './busbw.js';

/** A member of a reduced collective: rank, host, GPU (-1: not given). */
export type Member = [number, string, number];

export interface ReducedCollective {
  t: 'reduced';
  job: string;
  group: number;
  step: number;
  /** The latest report's event time. */
  ts: number;
  op: string;
  comm: string;
  nranks?: number;
  bytes: number;
  min_ms: number;
  max_ms: number;
  count: number;
  /** Bus bandwidth at the shortest duration (nccl-tests' definition). */
  busbw_gbs: number;
  /** Collectives: each member once, in the order they first reported. */
  members?: Member[];
  /** p2p: the edge as its first report gave it (sender or receiver side). */
  edge?: { rank: number; host: string; gpu: number; peer: number; peer_host?: string };
}

export interface ShardMark {
  t: 'mark';
  job: string;
  group: number;
  /** Every record of the group's steps up to here has been sent. */
  through: number;
  ts: number;
}

export type ShardRecord = ReducedCollective | ShardMark;

/** One group's open steps: each step's records by `op|comm` (p2p: `op|comm|from>to`). */
interface GroupState {
  job: string;
  group: number;
  steps: Map<number, Map<string, ReducedCollective>>;
  /** Sets per record of members already listed (by rank). */
  seen: Map<ReducedCollective, Set<number>>;
  maxStep: number;
  through: number;
}

export class ShardReducer {
  private readonly groups = new Map<string, GroupState>();

  /** A collective record of `group` (the bus key's); sends (to `out`) what a later step completes. */
  add(e: CollectiveEvent, group: number, out: ShardRecord[]): void {
    // A snapshot of a step still running, or a reporting interval: not one step's links (slowlink.add).
    if (e.window !== undefined && e.window !== 'step') return;
    const g = this.group(e.job, group);
    if (e.step > g.maxStep) {
      const before = g.maxStep;
      g.maxStep = e.step;
      if (before > Number.NEGATIVE_INFINITY) this.sendThrough(g, e.step - 1, e.ts, out);
    }
    let byKey = g.steps.get(e.step);
    if (!byKey) {
      byKey = new Map();
      g.steps.set(e.step, byKey);
    }
    const p2p = e.op === 'send' || e.op === 'recv';
    if (p2p && e.peer === undefined) return;
    const key = keyOf(e.op, e.comm, e.rank, e.peer);
    let r = byKey.get(key);
    if (!r) {
      r = {
        t: 'reduced',
        job: e.job,
        group,
        step: e.step,
        ts: e.ts,
        op: e.op,
        comm: e.comm,
        ...(e.nranks === undefined ? {} : { nranks: e.nranks }),
        bytes: e.bytes,
        min_ms: e.dur_ms,
        max_ms: e.dur_ms,
        count: 0,
        busbw_gbs: 0,
        ...(p2p
          ? {
              edge: {
                rank: e.rank,
                host: e.host,
                gpu: e.gpu ?? -1,
                peer: e.peer!,
                ...(e.peer_host === undefined ? {} : { peer_host: e.peer_host }),
              },
            }
          : { members: [] }),
      };
      byKey.set(key, r);
      if (!p2p) g.seen.set(r, new Set());
    }
    r.count++;
    if (e.ts > r.ts) r.ts = e.ts;
    if (e.dur_ms < r.min_ms) r.min_ms = e.dur_ms;
    if (e.dur_ms > r.max_ms) r.max_ms = e.dur_ms;
    const seen = g.seen.get(r);
    if (seen && !seen.has(e.rank)) {
      seen.add(e.rank);
      r.members!.push([e.rank, e.host, e.gpu ?? -1]);
    }
  }

  /** Sends every open step (end of input, an idle bus). */
  flush(out: ShardRecord[], ts: number): void {
    for (const g of this.groups.values()) this.sendThrough(g, g.maxStep, ts, out);
  }

  /** Another process owns the job now: drop its open steps without sending them. */
  forget(job: string): void {
    for (const [k, g] of this.groups) if (g.job === job) this.groups.delete(k);
  }

  private group(job: string, group: number): GroupState {
    const k = `${job}/${group}`;
    let g = this.groups.get(k);
    if (!g) {
      g = {
        job,
        group,
        steps: new Map(),
        seen: new Map(),
        maxStep: Number.NEGATIVE_INFINITY,
        through: Number.NEGATIVE_INFINITY,
      };
      this.groups.set(k, g);
    }
    return g;
  }

  private sendThrough(g: GroupState, step: number, ts: number, out: ShardRecord[]): void {
    if (step === Number.NEGATIVE_INFINITY) return;
    const done = [...g.steps.keys()].filter((s) => s <= step).sort((a, b) => a - b);
    for (const s of done) {
      for (const r of g.steps.get(s)!.values()) {
        r.busbw_gbs = busbwGBps(r.op, r.nranks ?? 2, r.bytes, r.min_ms);
        g.seen.delete(r);
        out.push(r);
      }
      g.steps.delete(s);
    }
    if (step > g.through) {
      g.through = step;
      out.push({ t: 'mark', job: g.job, group: g.group, through: step, ts });
    }
  }
}

/** Joins another shard's (or a redelivered) record of the same communicator and step into `into`. */
export function mergeReduced(into: ReducedCollective, r: ReducedCollective): void {
  into.count += r.count;
  if (r.ts > into.ts) into.ts = r.ts;
  if (r.max_ms > into.max_ms) into.max_ms = r.max_ms;
  if (r.min_ms < into.min_ms) {
    into.min_ms = r.min_ms;
    into.busbw_gbs = r.busbw_gbs;
  }
  if (!into.members || !r.members) return;
  const have = new Set(into.members.map((m) => m[0]));
  for (const m of r.members) if (!have.has(m[0])) into.members.push(m);
}

/** The key a merged record is filed under at the job stage. */
export function reducedKey(r: ReducedCollective): string {
  return keyOf(r.op, r.comm, r.edge?.rank ?? 0, r.edge?.peer);
}

/** A collective by op and communicator; a p2p edge by communicator, sender and receiver (both ends report it). */
function keyOf(op: string, comm: string, rank: number, peer: number | undefined): string {
  if (op !== 'send' && op !== 'recv') return `${op}|${comm}`;
  return `${comm}|${op === 'send' ? `${rank}>${peer}` : `${peer}>${rank}`}`;
}

/**
 * The collective records the judge reads for a merged record: one per member at the shortest
 * duration (the judge keeps the minimum and lists each member's rail), or the p2p edge's.
 */
export function toCollectives(r: ReducedCollective): CollectiveEvent[] {
  // Built field by field, not by spreads: the job stage makes one per p2p edge and step.
  const one = (rank: number, host: string, gpu: number): CollectiveEvent => {
    const e = {
      v: 1,
      kind: 'collective',
      ts: r.ts,
      job: r.job,
      rank,
      host,
      step: r.step,
      op: r.op,
      comm: r.comm,
      bytes: r.bytes,
      dur_ms: r.min_ms,
    } as CollectiveEvent;
    if (gpu >= 0) e.gpu = gpu;
    if (r.nranks !== undefined) e.nranks = r.nranks;
    return e;
  };
  if (r.edge) {
    const e = one(r.edge.rank, r.edge.host, r.edge.gpu);
    e.peer = r.edge.peer;
    if (r.edge.peer_host !== undefined) e.peer_host = r.edge.peer_host;
    return [e];
  }
  return (r.members ?? []).map(([rank, host, gpu]) => one(rank, host, gpu));
}
