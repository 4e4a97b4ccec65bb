/**
 * PyTorch ProcessGroupNCCL watchdog lines → `fault` events (source `nccl_timeout`).
 *
 * Ranks, as PyTorch prints them: the `[rankN]:` prefix (torch ≥ 2.2's log prefix) is the GLOBAL
 * rank; the `[Rank N]` on the "Watchdog caught collective operation timeout" line is the rank
 * within the process group that timed out. The group itself is named on the exception line that
 * follows for the same process, in three spellings: `[PG ID 0 PG GUID 0(default_pg) Rank 3]`,
 * `[PG 1 Rank 0]`, `[PG 0 (default_pg) Rank 12]`, which also says the last completed SeqNum.
 * So a timeout is held until its exception line arrives (or `flush()`), then emitted once;
 * the same timeout repeated in "watchdog thread terminated with exception" or "Original reason
 * for failure was" lines is not counted twice.
 */
import type { FaultEvent as F } from '../../schema/events.js';
import { stripPrefixes } from './nccl_tests.js';
import { type Open, type ParseProblem, problem } from './problems.js';

type FaultEvent = Open<F>;

export interface WatchdogTimeout {
  /** Global rank, from the `[rankN]:` prefix; undefined when the line has none (older torch). */
  rank?: number;
  /** Rank within the process group (`[Rank N]` on the timeout line). */
  groupRank: number;
  /** Process group id, when an exception line or PG prefix names it. */
  pg?: string;
  /** Process group name (`default_pg`, or the name a job gave it), when printed. */
  pgName?: string;
  seq: number;
  op: string;
  timeoutMs?: number;
  ranMs: number;
  /** "last completed NCCL work" from the exception line. */
  lastCompleted?: number;
}

const WORK =
  /Watchdog caught collective operation timeout:\s*WorkNCCL\((.*?)\)\s*ran for (\d+) milliseconds before timing out/;
// `[PG ID 0 PG GUID 0(default_pg) Rank 1]`, `[PG 1 Rank 0]`, `[PG 0 (default_pg) Rank 12]`.
const PG = /\[PG (?:ID )?(\d+)(?: PG GUID [^\s(\]]+)?\s*(?:\(([^)]*)\))?\s+Rank (\d+)\]/;
const GROUP_RANK = /\[Rank (\d+)\]\s*Watchdog caught/;
const GLOBAL_RANK = /\[rank(\d+)\]:/;
const EXCEPTION =
  /Exception \(either an error or timeout\) detected by watchdog at work: (\d+).*?last completed NCCL work: (-?\d+)/;
// A line wrapped where these end continues on the next line (which starts as CONTINUATION says).
const WRAPPED =
  /(?:Watchdog caught collective operation timeout:|Exception \(either an error or timeout\) detected)\s*$/;
const CONTINUATION = /^\s*(?:WorkNCCL\(|by watchdog)/;
/** A timeout waits this many lines for its exception line before it is emitted without it. */
const WAIT_LINES = 200;

export interface WatchdogContext {
  host: string;
  job?: string;
}

/**
 * Stateful reader of one log: `push` each line, take what it returns; `flush` at quiet times and
 * at the end. Lines a rank split at "timeout:" (seen when stderr is wrapped) are joined.
 */
export class WatchdogReader {
  private pending: { t: WatchdogTimeout; line: number }[] = [];
  private readonly seen = new Set<string>();
  private carry?: string;
  private lineNo = 0;

  constructor(private readonly ctx: WatchdogContext) {}

  push(raw: string, ts: number): { events: FaultEvent[]; problems: ParseProblem[] } {
    const out = { events: [] as FaultEvent[], problems: [] as ParseProblem[] };
    this.lineNo++;
    let line = stripPrefixes(raw.endsWith('\r') ? raw.slice(0, -1) : raw);
    if (this.carry !== undefined) {
      const head = this.carry;
      this.carry = undefined;
      if (CONTINUATION.test(line)) line = `${head} ${line.trim()}`;
      else this.handle(head, ts, out);
    }
    if (WRAPPED.test(line)) this.carry = line;
    else this.handle(line, ts, out);
    // Anything waiting too long for its exception line goes out as it is.
    while (this.pending.length && this.lineNo - this.pending[0].line > WAIT_LINES)
      out.events.push(this.event(this.pending.shift()!.t, ts));
    return out;
  }

  /** Emits every timeout still waiting for its exception line (and a wrapped line's head). */
  flush(ts: number): { events: FaultEvent[]; problems: ParseProblem[] } {
    const out = { events: [] as FaultEvent[], problems: [] as ParseProblem[] };
    if (this.carry !== undefined) this.handle(this.carry, ts, out);
    this.carry = undefined;
    out.events.push(...this.pending.map((p) => this.event(p.t, ts)));
    this.pending = [];
    return out;
  }

  private handle(line: string, ts: number, out: { events: FaultEvent[]; problems: ParseProblem[] }): void {
    const ex = EXCEPTION.exec(line);
    if (ex) this.attach(line, Number(ex[1]), Number(ex[2]), ts, out.events);
    else if (line.includes('Watchdog caught collective')) this.timeout(line, out);
  }

  private timeout(line: string, out: { events: FaultEvent[]; problems: ParseProblem[] }): void {
    const m = WORK.exec(line);
    if (!m) {
      out.problems.push(problem(this.lineNo, 'watchdog timeout line in an unknown or cut-off form', line));
      return;
    }
    const fields: Record<string, string> = {};
    for (const kv of m[1].split(',')) {
      const i = kv.indexOf('=');
      if (i > 0) fields[kv.slice(0, i).trim()] = kv.slice(i + 1).trim();
    }
    const seq = Number(fields.SeqNum);
    // "[PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog…"
    const pg = PG.exec(line.slice(0, m.index));
    const groupRankText = GROUP_RANK.exec(line)?.[1] ?? pg?.[3];
    if (groupRankText === undefined || !Number.isInteger(seq)) {
      out.problems.push(problem(this.lineNo, 'watchdog timeout line without a rank or SeqNum', line));
      return;
    }
    const global = GLOBAL_RANK.exec(line)?.[1];
    const t: WatchdogTimeout = {
      ...(global !== undefined ? { rank: Number(global) } : {}),
      groupRank: Number(groupRankText),
      ...(pg ? { pg: pg[1], ...(pg[2] ? { pgName: pg[2] } : {}) } : {}),
      seq,
      op: fields.OpType ?? 'unknown',
      ranMs: Number(m[2]),
    };
    const timeoutMs = Number(fields['Timeout(ms)']);
    if (Number.isFinite(timeoutMs)) t.timeoutMs = timeoutMs;
    // The same timeout, repeated by the exception that ends the process (often without `[rankN]:`).
    const byGroup = `g${t.groupRank}|${t.seq}|${t.op}`;
    const key = t.rank !== undefined ? `${t.rank}|${t.seq}|${t.op}` : byGroup;
    if (this.seen.has(key)) {
      // A repeat may name the group the first print did not: keep it while the timeout waits.
      const waiting = this.pending.find(
        (p) => p.t.seq === t.seq && p.t.op === t.op && p.t.groupRank === t.groupRank && p.t.pg === undefined,
      );
      if (waiting && t.pg !== undefined) {
        waiting.t.pg = t.pg;
        if (t.pgName) waiting.t.pgName = t.pgName;
      }
      return;
    }
    if (this.seen.size > 100_000) this.seen.clear();
    this.seen.add(key).add(byGroup);
    this.pending.push({ t, line: this.lineNo });
  }

  /** Completes the waiting timeout of the same process (global rank) and SeqNum with its group. */
  private attach(line: string, seq: number, lastCompleted: number, ts: number, events: FaultEvent[]): void {
    const global = GLOBAL_RANK.exec(line)?.[1];
    const pg = PG.exec(line);
    const i = this.pending.findIndex(
      (p) =>
        p.t.seq === seq &&
        (global !== undefined ? p.t.rank === Number(global) : p.t.groupRank === Number(pg?.[3])),
    );
    if (i < 0) return;
    const { t } = this.pending.splice(i, 1)[0];
    if (pg) {
      t.pg = pg[1];
      if (pg[2]) t.pgName = pg[2];
    }
    t.lastCompleted = lastCompleted;
    events.push(this.event(t, ts));
  }

  private event(t: WatchdogTimeout, ts: number): FaultEvent {
    // Without the `[rankN]:` prefix only the default group's rank is the global rank.
    const rank = t.rank ?? (t.pg === '0' ? t.groupRank : undefined);
    const group =
      t.pg !== undefined
        ? `process group ${t.pg}${t.pgName ? ` (${t.pgName})` : ''}`
        : 'process group not printed';
    return {
      v: 1,
      kind: 'fault',
      ts,
      host: this.ctx.host,
      ...(this.ctx.job ? { job: this.ctx.job } : {}),
      ...(rank !== undefined ? { rank } : {}),
      source: 'nccl_timeout',
      code: t.op,
      message: `NCCL ${t.op} SeqNum ${t.seq} ran ${t.ranMs} ms before timing out (${group}, rank ${t.groupRank} in the group)`,
      seq: t.seq,
      op: t.op,
      group_rank: t.groupRank,
      ran_ms: t.ranMs,
      ...(t.pg !== undefined ? { pg: t.pg } : {}),
      ...(t.pgName !== undefined ? { pg_name: t.pgName } : {}),
      ...(t.timeoutMs !== undefined ? { timeout_ms: t.timeoutMs } : {}),
      ...(t.lastCompleted !== undefined ? { last_completed: t.lastCompleted } : {}),
    };
  }
}
