/**
 * Hangs from NCCL watchdog timeouts (`fault` events, source `nccl_timeout`, as the nccl_watchdog
 * source writes them: `seq`, `op`, `group_rank`, `pg`?, `last_completed`?).
 *
 * - `nccl_hang`: the job's collectives timed out; one finding per job, naming the first rank.
 * - `nccl_desync`: ranks of one process group timed out at the same SeqNum in different
 *   operations: they called collectives in a different order (a code-path divergence), so no
 *   amount of waiting would have completed them.
 * - `nccl_rank_behind`: within a process group, the rank whose last completed SeqNum is lowest is
 *   the one the others waited for. Named only when the group is known (the exception line
 *   printed it): SeqNums of different groups are not comparable.
 * Pure: events in, findings out through the FindingLog; a restart or finish of the job ends them.
 */
import type { FaultEvent } from '../../schema/events.js';
import { type FindingLog, findingId } from '../findings.js';

interface Timeout {
  ts: number;
  host: string;
  rank?: number;
  groupRank: number;
  pg?: string;
  pgName?: string;
  seq: number;
  op: string;
  lastCompleted?: number;
  timeoutMs?: number;
  ranMs?: number;
}

interface JobHang {
  hangId?: string;
  timeouts: Timeout[];
  desyncs: Set<string>;
  /** Open rank-behind finding per process group: its id and rank key. */
  behind: Map<string, { id: string; who: string }>;
}

const MAX_TIMEOUTS = 10_000;
const who = (t: Timeout) => (t.rank !== undefined ? `rank ${t.rank}` : `${t.host} group rank ${t.groupRank}`);
const brief = (t: Timeout) => ({
  host: t.host,
  ...(t.rank !== undefined ? { rank: t.rank } : {}),
  group_rank: t.groupRank,
  op: t.op,
  seq: t.seq,
  ...(t.lastCompleted !== undefined ? { last_completed: t.lastCompleted } : {}),
});

export class HangDetector {
  private readonly jobs = new Map<string, JobHang>();

  constructor(private readonly log: FindingLog) {}

  process(e: FaultEvent): void {
    const t = toTimeout(e);
    if (!t) return;
    const key = e.job ?? '';
    let j = this.jobs.get(key);
    if (!j) {
      j = { timeouts: [], desyncs: new Set(), behind: new Map() };
      this.jobs.set(key, j);
    }
    if (j.timeouts.length >= MAX_TIMEOUTS) return;
    j.timeouts.push(t);
    this.hang(j, e.job, t);
    this.desync(j, e.job, t);
    if (t.pg !== undefined) this.behind(j, e.job, t.pg, t.ts);
  }

  /** A restart or finish ends what the hang opened. */
  endJob(job: string, ts: number, why: string): void {
    const j = this.jobs.get(job);
    if (!j) return;
    this.jobs.delete(job);
    const summary = `job ${job} ${why === 'finished' ? 'finished' : `had a ${why}`} after its NCCL timeouts.`;
    if (j.hangId) this.log.resolve(j.hangId, ts, { summary });
    for (const d of j.desyncs) this.log.resolve(d, ts, { summary });
    for (const b of j.behind.values()) this.log.resolve(b.id, ts, { summary });
  }

  private hang(j: JobHang, job: string | undefined, t: Timeout): void {
    const hosts = [...new Set(j.timeouts.map((x) => x.host))].sort();
    const ranks = new Set(j.timeouts.map(who));
    const evidence = {
      timed_out: ranks.size,
      hosts,
      first: brief(j.timeouts[0]),
      pgs: [...new Set(j.timeouts.map((x) => x.pg ?? 'unknown'))],
      ...(t.timeoutMs !== undefined ? { timeout_ms: t.timeoutMs } : {}),
      timeouts: j.timeouts.slice(0, 64).map(brief),
    };
    if (j.hangId && this.log.isOpen(j.hangId)) {
      this.log.update(j.hangId, t.ts, { evidence });
      return;
    }
    const f = j.timeouts[0];
    j.hangId = findingId('nccl_hang', job, f.host, f.ts);
    this.log.openFinding(j.hangId, t.ts, {
      type: 'nccl_hang',
      job,
      host: f.host,
      ...(f.rank !== undefined ? { rank: f.rank } : {}),
      severity: 'critical',
      onset_ts: f.ts,
      action: 'none',
      evidence,
      summary: `${job ? `job ${job}` : f.host} hung: ${who(f)} on ${f.host} timed out in ${f.op} (SeqNum ${f.seq}${f.pg !== undefined ? `, process group ${f.pg}` : ''}) after ${f.ranMs ?? '?'} ms.`,
    });
  }

  private desync(j: JobHang, job: string | undefined, t: Timeout): void {
    const pg = t.pg ?? 'unknown';
    const same = j.timeouts.filter((x) => x.seq === t.seq && (x.pg ?? 'unknown') === pg);
    const byOp = new Map<string, Timeout[]>();
    for (const x of same) {
      const list = byOp.get(x.op) ?? [];
      if (!list.some((y) => who(y) === who(x))) list.push(x);
      byOp.set(x.op, list);
    }
    if (byOp.size < 2) return;
    // One rank in two operations at one SeqNum means two groups whose ids were not printed.
    const whos = [...byOp.values()].flat().map(who);
    if (new Set(whos).size !== whos.length) return;
    const id = findingId('nccl_desync', job, pg, t.seq);
    const ops = Object.fromEntries([...byOp].map(([op, xs]) => [op, xs.map(brief)]));
    const odd = [...byOp.values()].sort((a, b) => a.length - b.length)[0][0];
    const evidence = {
      pg,
      ...(t.pgName ? { pg_name: t.pgName } : {}),
      pg_known: t.pg !== undefined,
      seq: t.seq,
      ops,
    };
    if (j.desyncs.has(id)) {
      this.log.update(id, t.ts, { evidence });
      return;
    }
    j.desyncs.add(id);
    const listing = [...byOp].map(([op, xs]) => `${xs.map(who).join(', ')} in ${op}`).join('; ');
    this.log.openFinding(id, t.ts, {
      type: 'nccl_desync',
      job,
      host: odd.host,
      ...(odd.rank !== undefined ? { rank: odd.rank } : {}),
      severity: 'critical',
      onset_ts: same[0].ts,
      action: 'none',
      evidence,
      summary: `Ranks called different collectives at SeqNum ${t.seq} (process group ${pg}): ${listing}. Their code paths diverged; this is not a slow link.`,
    });
  }

  private behind(j: JobHang, job: string | undefined, pg: string, ts: number): void {
    const last = new Map<string, Timeout>();
    for (const x of j.timeouts) {
      if (x.pg !== pg) continue;
      const done = x.lastCompleted ?? x.seq - 1;
      const prev = last.get(who(x));
      if (!prev || done > (prev.lastCompleted ?? prev.seq - 1)) last.set(who(x), x);
    }
    if (last.size < 2) return;
    const progress = (x: Timeout) => x.lastCompleted ?? x.seq - 1;
    const all = [...last.values()];
    const min = Math.min(...all.map(progress));
    const max = Math.max(...all.map(progress));
    if (min === max) return;
    const laggards = all.filter((x) => progress(x) === min);
    // One rank behind names a suspect; several equally behind are not one suspect.
    const open = j.behind.get(pg);
    if (laggards.length !== 1) return;
    const l = laggards[0];
    if (open?.who === who(l)) return;
    if (open)
      this.log.resolve(open.id, ts, {
        summary: `${open.who} is not the rank furthest behind in process group ${pg}.`,
      });
    const id = findingId('nccl_rank_behind', job, pg, who(l));
    j.behind.set(pg, { id, who: who(l) });
    this.log.openFinding(id, ts, {
      type: 'nccl_rank_behind',
      job,
      host: l.host,
      ...(l.rank !== undefined ? { rank: l.rank } : {}),
      severity: 'critical',
      onset_ts: l.ts,
      action: 'watch',
      evidence: {
        pg,
        ...(l.pgName ? { pg_name: l.pgName } : {}),
        group_rank: l.groupRank,
        last_completed: min,
        peers_last_completed: max,
        peers: last.size - 1,
        seq: l.seq,
        op: l.op,
      },
      summary: `${who(l)} on ${l.host} is stuck behind process group ${pg}: its last completed collective is SeqNum ${min}, its peers reached ${max}. The others waited for it.`,
    });
  }
}

function toTimeout(e: FaultEvent): Timeout | undefined {
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
