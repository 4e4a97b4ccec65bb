/**
 * PyTorch ProcessGroupNCCL watchdog lines → `fault` events (source `nccl_timeout`), and the pure
 * rule that names the rank stuck behind: ranks that time out on a later collective than a peer
 * are waiting for that peer, so the rank whose last SeqNum is lowest in its process group lags.
 */
import type { FaultEvent as F } from '../../schema/events.js';
import { type Open, type ParseProblem, problem } from './problems.js';

type FaultEvent = Open<F>;

export interface WatchdogTimeout {
  rank: number;
  /** Process group, when the line names one ("0" for the default group otherwise). */
  pg: string;
  seq: number;
  op: string;
  timeoutMs?: number;
  ranMs: number;
}

export type WatchdogLine =
  | { event: FaultEvent; timeout: WatchdogTimeout }
  | { problem: ParseProblem }
  | { ignored: true };

const WORK =
  /Watchdog caught collective operation timeout: WorkNCCL\((.*?)\) ran for (\d+) milliseconds before timing out/;
const RANK = /\[(?:PG (?:ID )?(\S+)(?: PG GUID \S+)? )?Rank (\d+)\]/;
const PREFIX_RANK = /^\[rank(\d+)\]/;

export function parseWatchdogLine(
  line: string,
  lineNo: number,
  now: number,
  ctx: { host: string; job?: string },
): WatchdogLine {
  if (!line.includes('Watchdog caught collective operation timeout')) return { ignored: true };
  const m = WORK.exec(line);
  if (!m) return { problem: problem(lineNo, 'watchdog timeout line in an unknown or truncated form', line) };
  const fields: Record<string, string> = {};
  for (const kv of m[1].split(',')) {
    const i = kv.indexOf('=');
    if (i > 0) fields[kv.slice(0, i).trim()] = kv.slice(i + 1).trim();
  }
  const r = RANK.exec(line);
  const rankText = r?.[2] ?? PREFIX_RANK.exec(line)?.[1];
  const seq = Number(fields.SeqNum);
  if (rankText === undefined || !Number.isInteger(seq))
    return { problem: problem(lineNo, 'watchdog timeout line without a rank or SeqNum', line) };
  const timeout: WatchdogTimeout = {
    rank: Number(rankText),
    pg: r?.[1] ?? '0',
    seq,
    op: fields.OpType ?? 'unknown',
    ranMs: Number(m[2]),
  };
  const t = Number(fields['Timeout(ms)']);
  if (Number.isFinite(t)) timeout.timeoutMs = t;
  const event: FaultEvent = {
    v: 1,
    kind: 'fault',
    ts: now,
    host: ctx.host,
    ...(ctx.job ? { job: ctx.job } : {}),
    rank: timeout.rank,
    source: 'nccl_timeout',
    code: timeout.op,
    message: `NCCL ${timeout.op} SeqNum ${seq} ran ${timeout.ranMs} ms before timing out (process group ${timeout.pg})`,
    seq,
    pg: timeout.pg,
    ran_ms: timeout.ranMs,
    ...(timeout.timeoutMs !== undefined ? { timeout_ms: timeout.timeoutMs } : {}),
  };
  return { event, timeout };
}

export interface Laggard {
  pg: string;
  rank: number;
  seq: number;
  /** The highest SeqNum its peers reached. */
  peersSeq: number;
}

/** Per process group: the ranks whose last timed-out SeqNum is below their peers'. */
export function findLaggards(timeouts: WatchdogTimeout[]): Laggard[] {
  const last = new Map<string, Map<number, number>>();
  for (const t of timeouts) {
    const g = last.get(t.pg) ?? new Map<number, number>();
    last.set(t.pg, g);
    g.set(t.rank, Math.max(g.get(t.rank) ?? -1, t.seq));
  }
  const out: Laggard[] = [];
  for (const [pg, ranks] of last) {
    const seqs = [...ranks.values()];
    const max = Math.max(...seqs);
    const min = Math.min(...seqs);
    if (ranks.size < 2 || min === max) continue;
    for (const [rank, seq] of ranks) if (seq === min) out.push({ pg, rank, seq, peersSeq: max });
  }
  return out.sort((a, b) => a.rank - b.rank);
}
