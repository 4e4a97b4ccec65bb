/**
 * One job's NCCL watchdog timeouts (`fault` events, source `nccl_timeout`, as the nccl_watchdog
 * source writes them: `seq`, `op`, `group_rank`, `pg`?, `pg_name`?, `last_completed`?), read as
 * evidence about a hang: who timed out (the peers that waited), who did not (the suspects), the
 * rank furthest behind in a process group, and ranks of one group that called different
 * collectives at one SeqNum (a desync).
 *
 * SeqNums are compared only within a process group whose id was printed, and only for
 * collectives: a send and a recv at one SeqNum are a pair, not a divergence, and each rank counts
 * its own point-to-point operations.
 */
import type { WatchdogTimeout } from '../../collectors/parsers/nccl_watchdog.js';
import type { FaultEvent } from '../../schema/events.js';

/** A timeout as the parser read it, where and when it was reported; `ran_ms` is optional on the wire. */
export interface Timeout extends Omit<WatchdogTimeout, 'ranMs'> {
  ts: number;
  host: string;
  ranMs?: number;
}

export interface Desync {
  pg: string;
  pgName?: string;
  seq: number;
  ops: Map<string, Timeout[]>;
  /** The rank of the rarer operation: the one that diverged. */
  odd: Timeout;
  first: Timeout;
}

/** Evidence kept per job; the counts cover all of them. */
const MAX_KEPT = 10_000;
const P2P_OPS = /^_?(SEND|RECV|COALESCED)/i;

export const who = (t: Timeout) =>
  t.rank !== undefined ? `rank ${t.rank}` : `${t.host} group rank ${t.groupRank}`;

export const brief = (t: Timeout) => ({
  host: t.host,
  ...(t.rank !== undefined ? { rank: t.rank } : {}),
  group_rank: t.groupRank,
  ...(t.pg !== undefined ? { pg: t.pg } : {}),
  ...(t.pgName ? { pg_name: t.pgName } : {}),
  op: t.op,
  seq: t.seq,
  ...(t.lastCompleted !== undefined ? { last_completed: t.lastCompleted } : {}),
});

const done = (t: Timeout) => t.lastCompleted ?? t.seq - 1;

export class JobTimeouts {
  readonly kept: Timeout[] = [];
  count = 0;
  /** Global ranks that timed out. */
  readonly ranks = new Set<number>();
  readonly hosts = new Set<string>();
  /** Per known group (collectives only): each rank's furthest progress. */
  private readonly progress = new Map<string, Map<string, Timeout>>();
  /** Per known group and SeqNum (collectives only): the ranks in each operation. */
  private readonly atSeq = new Map<string, Map<string, Timeout[]>>();

  /** Records a timeout; returns a desync it reveals, if any. */
  add(t: Timeout): Desync | undefined {
    this.count++;
    if (t.rank !== undefined) this.ranks.add(t.rank);
    this.hosts.add(t.host);
    if (this.kept.length >= MAX_KEPT) return undefined;
    this.kept.push(t);
    if (t.pg === undefined || P2P_OPS.test(t.op)) return undefined;
    const group = this.progress.get(t.pg) ?? new Map<string, Timeout>();
    this.progress.set(t.pg, group);
    const prev = group.get(who(t));
    if (!prev || done(t) > done(prev)) group.set(who(t), t);
    return this.desync(t, t.pg);
  }

  get first(): Timeout | undefined {
    return this.kept[0];
  }

  /**
   * The one rank of a known group whose last completed SeqNum is lowest while its peers got
   * further: the rank the others waited for. Several equally behind name no one.
   */
  behind(): { t: Timeout; peers: number; peersDone: number } | undefined {
    for (const group of this.progress.values()) {
      if (group.size < 2) continue;
      let min = Number.POSITIVE_INFINITY;
      let max = Number.NEGATIVE_INFINITY;
      for (const t of group.values()) {
        min = Math.min(min, done(t));
        max = Math.max(max, done(t));
      }
      if (min === max) continue;
      const laggards = [...group.values()].filter((t) => done(t) === min);
      if (laggards.length === 1) return { t: laggards[0], peers: group.size - 1, peersDone: max };
    }
    return undefined;
  }

  /**
   * The collective the peers began to wait in first (its group, operation and SeqNum): the rank
   * that never joined it held up everything after it. Each timeout began `ran_ms` before it fired.
   */
  firstWait(): { pg?: string; pg_name?: string; op: string; seq: number; ranks: number } | undefined {
    // A timeout whose group was not printed joins the known group of its operation and SeqNum.
    const known = new Map<string, string>();
    for (const t of this.kept) if (t.pg !== undefined) known.set(`${t.op}|${t.seq}`, t.pg);
    const groups = new Map<string, { t: Timeout; n: number; since: number }>();
    for (const t of this.kept) {
      const pg = t.pg ?? known.get(`${t.op}|${t.seq}`) ?? '?';
      const key = `${pg}|${t.op}|${t.seq}`;
      const since = t.ts - (t.ranMs ?? 0);
      const g = groups.get(key);
      if (g) {
        g.n++;
        g.since = Math.min(g.since, since);
        if (g.t.pg === undefined && t.pg !== undefined) g.t = t;
      } else groups.set(key, { t, n: 1, since });
    }
    let best: { t: Timeout; n: number; since: number } | undefined;
    for (const g of groups.values())
      if (!best || g.since < best.since || (g.since === best.since && g.n > best.n)) best = g;
    if (!best) return undefined;
    const { t, n } = best;
    return {
      ...(t.pg !== undefined ? { pg: t.pg } : {}),
      ...(t.pgName ? { pg_name: t.pgName } : {}),
      op: t.op,
      seq: t.seq,
      ranks: n,
    };
  }

  /** Ranks of one group timed out at one SeqNum in different operations. */
  private desync(t: Timeout, pg: string): Desync | undefined {
    const key = `${pg}|${t.seq}`;
    const byOp = this.atSeq.get(key) ?? new Map<string, Timeout[]>();
    this.atSeq.set(key, byOp);
    const list = byOp.get(t.op) ?? [];
    if (!list.some((y) => who(y) === who(t))) list.push(t);
    byOp.set(t.op, list);
    if (byOp.size < 2) return undefined;
    // One rank in two operations at one SeqNum is two groups under one id, not a divergence.
    const whos = [...byOp.values()].flat().map(who);
    if (new Set(whos).size !== whos.length) return undefined;
    const ranked = [...byOp.values()].sort((a, b) => a.length - b.length);
    return { pg, pgName: t.pgName, seq: t.seq, ops: byOp, odd: ranked[0][0], first: ranked.at(-1)![0] };
  }
}

export function toTimeout(e: FaultEvent): Timeout | undefined {
  if (e.source !== 'nccl_timeout') return undefined;
  const x = e as FaultEvent & Record<string, unknown>;
  const int = (v: unknown) => (typeof v === 'number' && Number.isInteger(v) ? v : undefined);
  const seq = int(x.seq);
  if (seq === undefined) return undefined;
  const groupRank = int(x.group_rank) ?? e.rank;
  if (groupRank === undefined) return undefined;
  return {
    ts: e.ts,
    host: e.host,
    ...(e.rank !== undefined ? { rank: e.rank } : {}),
    groupRank,
    ...(typeof x.pg === 'string' ? { pg: x.pg } : {}),
    ...(typeof x.pg_name === 'string' ? { pgName: x.pg_name } : {}),
    seq,
    op: typeof x.op === 'string' ? x.op : String(e.code ?? 'unknown'),
    ...(int(x.last_completed) !== undefined ? { lastCompleted: int(x.last_completed) } : {}),
    ...(int(x.timeout_ms) !== undefined ? { timeoutMs: int(x.timeout_ms) } : {}),
    ...(int(x.ran_ms) !== undefined ? { ranMs: int(x.ran_ms) } : {}),
  };
}
