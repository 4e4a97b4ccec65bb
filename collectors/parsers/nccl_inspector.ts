/**
 * NCCL Inspector's JSON dump lines (the profiler plugin in NVIDIA/nccl plugins/profiler/inspector,
 * formerly ext-profiler/inspector; one file per process, `<hostname>-pid<pid>.log`, one compact JSON
 * object per line) → one record per completed collective or p2p operation.
 *
 * Format versions (`metadata.inspector_output_format_version`), all read:
 * - v4.0 (NCCL 2.28, 2.29): `{header, metadata, coll_perf}`; verbose adds `event_trace_sn/_ts`.
 * - 2.30 (still "v4.0"): `header.comm_name`, and `p2p_perf` records (`p2p_peer`: a communicator rank).
 * - v4.1: a `dump_stats` record per communicator and dump (records written, ring-buffer drops).
 * - v4.2: `coll_algo`, `coll_proto` in `coll_perf`; v4.3: `proxy_trace` records.
 * - v4.3 compact (inspector_json_reader.py): after a v4.3 `dump_stats`, its records carry only their
 *   payload (`{"coll_perf": …}`), the header and metadata coming from the dump_stats before them,
 *   as many as it counts. The context lives in one file; a payload without it is refused.
 * Verbose or not; a line that is not one whole record (cut, interleaved, CRLF is fine) is a problem
 * with its line number, never a crash. `coll_sn` counts per communicator and op (NCCL's
 * seqNumber[func]). Operations rankwatch has no name for (Reduce, SendRecv) are counted as ignored.
 */
import type { CollectiveEvent } from '../../schema/events.js';
import { collectiveOp } from './collective_op.js';
import { type ParseProblem, problem } from './problems.js';

export type CollectiveOp = CollectiveEvent['op'];

/** One completed operation of one communicator rank, as Inspector reported it. */
export interface InspectorOp {
  host: string;
  /** The process (JSON records); Prometheus records name a GPU instead. */
  pid?: number;
  gpu?: number;
  /** Communicator id (Inspector's comm hash, e.g. "0x7f8c496ae9f661"). */
  comm: string;
  commName?: string;
  commRank: number;
  nranks: number;
  op: CollectiveOp;
  /** The communicator's sequence number of this op (per op kind). */
  seq: number;
  bytes: number;
  execUs: number;
  busbwGbs?: number;
  /** send/recv: the peer's rank in the communicator. */
  peer?: number;
  /** When it completed (epoch ms): the kernel stop time when verbose, else when it was dumped. */
  tMs: number;
}

/** Records Inspector itself lost (its ring buffer overflowed between dumps), from v4.1+ dump_stats. */
export interface RingDrops {
  host: string;
  pid: number;
  comm: string;
  dropped: number;
}

export interface LineResult {
  op?: InspectorOp;
  problem?: ParseProblem;
  /** A record or field kind read but not used (proxy_trace, coll:Reduce, …). */
  ignored?: string;
  drops?: RingDrops;
}

/** Longer than any collective can run and still be a measurement (a day, in µs). */
const MAX_EXEC_US = 86_400e6;

type Obj = Record<string, unknown>;

interface Context {
  header: Obj;
  metadata: Obj;
  remaining: Record<string, number>;
}

/** Reads one file's lines in order (the v4.3 compact form needs the lines before). */
export class InspectorJsonReader {
  private ctx: Context | undefined;
  private ctxLine = 0;

  push(line: string, lineNo: number): LineResult {
    const text = line.endsWith('\r') ? line.slice(0, -1) : line;
    if (text.trim() === '') return {};
    let rec: unknown;
    try {
      rec = JSON.parse(text);
    } catch {
      return {
        problem: problem(lineNo, 'not one whole JSON record (cut short, or two writers interleaved)', text),
      };
    }
    if (!isObj(rec)) return { problem: problem(lineNo, 'not a JSON object', text) };
    if (isObj(rec.dump_stats)) return this.dumpStats(rec, lineNo, text);
    let header = rec.header;
    let metadata = rec.metadata;
    const kind = ['coll_perf', 'p2p_perf', 'proxy_trace'].find((k) => k in rec);
    if (!kind)
      return {
        problem: problem(lineNo, 'no coll_perf, p2p_perf, proxy_trace or dump_stats in the record', text),
      };
    if (header === undefined && metadata === undefined) {
      // v4.3 compact: the payload alone, its context from the dump_stats before it.
      const ctx = this.ctx;
      if (!ctx || (ctx.remaining[kind] ?? 0) <= 0)
        return {
          problem: problem(
            lineNo,
            `a ${kind} payload with no dump_stats counting it before it (the file was cut, or dumps interleaved)`,
            text,
          ),
        };
      ctx.remaining[kind]--;
      header = ctx.header;
      metadata = ctx.metadata;
    }
    if (kind === 'proxy_trace') return { ignored: 'proxy_trace' };
    if (!isObj(header) || !isObj(metadata))
      return { problem: problem(lineNo, 'header or metadata is not an object', text) };
    return this.operation(header, metadata, rec[kind], kind === 'coll_perf' ? 'coll' : 'p2p', lineNo, text);
  }

  /** At the end of a file: a v4.3 dump whose records did not all arrive. */
  finish(): ParseProblem[] {
    const missing = this.missing();
    this.ctx = undefined;
    return missing > 0
      ? [problem(this.ctxLine, `dump cut short: ${missing} record(s) its dump_stats counted never came`, '')]
      : [];
  }

  private missing(): number {
    return this.ctx ? Object.values(this.ctx.remaining).reduce((a, b) => a + Math.max(0, b), 0) : 0;
  }

  private dumpStats(rec: Obj, lineNo: number, text: string): LineResult {
    const cut = this.missing();
    const out: LineResult =
      cut > 0
        ? {
            problem: problem(
              lineNo,
              `the dump before was cut short: ${cut} record(s) its dump_stats counted never came`,
              text,
            ),
          }
        : {};
    this.ctx = undefined;
    const stats = rec.dump_stats as Obj;
    const header = rec.header;
    const metadata = rec.metadata;
    if (!isObj(header) || !isObj(metadata))
      return out.problem ? out : { problem: problem(lineNo, 'dump_stats without header or metadata', text) };
    if (
      metadata.inspector_output_format_version === 'v4.3' &&
      isCount(stats.coll_records) &&
      isCount(stats.p2p_records)
    ) {
      // Whether this file is compact shows in the next line: a payload alone uses the counts.
      this.ctx = {
        header,
        metadata,
        remaining: {
          coll_perf: stats.coll_records,
          p2p_perf: stats.p2p_records,
          proxy_trace: isCount(stats.proxy_records) ? stats.proxy_records : 0,
        },
      };
      this.ctxLine = lineNo;
    }
    const dropped = count(stats.coll_dropped_since_last_dump) + count(stats.p2p_dropped_since_last_dump);
    const host = metadata.hostname;
    const pid = metadata.pid;
    if (dropped > 0 && typeof host === 'string' && isCount(pid) && typeof header.id === 'string')
      out.drops = { host, pid, comm: header.id, dropped };
    return out;
  }

  private operation(
    header: Obj,
    metadata: Obj,
    perf: unknown,
    kind: 'coll' | 'p2p',
    lineNo: number,
    text: string,
  ): LineResult {
    const bad = (why: string): LineResult => ({ problem: problem(lineNo, why, text) });
    if (!isObj(perf)) return bad(`${kind}_perf is not an object`);
    const name = perf[kind];
    if (typeof name !== 'string') return bad(`${kind}_perf.${kind} (the operation) is missing`);
    const op = collectiveOp(name);
    if (!op) return { ignored: `${kind}:${name}` };
    const comm = header.id;
    if (typeof comm !== 'string' || comm === '') return bad('header.id (the communicator) is missing');
    const commRank = header.rank;
    const nranks = header.n_ranks;
    if (!isCount(commRank) || !isCount(nranks) || nranks < 1 || commRank >= nranks)
      return bad(
        `header.rank ${String(commRank)} of n_ranks ${String(nranks)} is not a rank of the communicator`,
      );
    const host = metadata.hostname;
    const pid = metadata.pid;
    if (typeof host !== 'string' || host === '') return bad('metadata.hostname is missing');
    if (!isCount(pid) || pid === 0) return bad('metadata.pid is missing');
    const seq = perf[`${kind}_sn`];
    const bytes = perf[`${kind}_msg_size_bytes`];
    const execUs = perf[`${kind}_exec_time_us`];
    if (!isCount(seq)) return bad(`${kind}_sn is not a sequence number`);
    if (!isCount(bytes) || bytes > Number.MAX_SAFE_INTEGER)
      return bad(`${kind}_msg_size_bytes is not a byte count`);
    if (typeof execUs !== 'number' || !(execUs >= 0) || execUs > MAX_EXEC_US)
      return bad(`${kind}_exec_time_us ${String(execUs)} cannot be an execution time`);
    const dumpUs = metadata.dump_timestamp_us;
    if (typeof dumpUs !== 'number' || !(dumpUs > 0)) return bad('metadata.dump_timestamp_us is missing');
    const busbw = perf[`${kind}_busbw_gbs`];
    const commName = header.comm_name;
    const peer = perf.p2p_peer;
    const rec: InspectorOp = {
      host,
      pid,
      comm,
      commRank,
      nranks,
      op,
      seq,
      bytes,
      execUs,
      tMs: completedUs(perf, kind, execUs, dumpUs) / 1000,
    };
    if (isBandwidth(busbw)) rec.busbwGbs = busbw;
    if (typeof commName === 'string' && commName !== '' && commName !== 'unknown') rec.commName = commName;
    if (kind === 'p2p') {
      if (!isCount(peer) || peer >= nranks)
        return bad(`p2p_peer ${String(peer)} is not a rank of the communicator`);
      rec.peer = peer;
    }
    return { op: rec };
  }
}

/**
 * When the op completed, in epoch µs: the last kernel stop of a verbose record (GPU timing), else
 * the CPU start plus the execution time, else the dump time (an upper bound: it was done by then).
 */
function completedUs(perf: Obj, kind: string, execUs: number, dumpUs: number): number {
  const ts = perf.event_trace_ts;
  if (isObj(ts)) {
    let stop = 0;
    if (Array.isArray(ts.kernel_events))
      for (const k of ts.kernel_events)
        if (isObj(k) && typeof k.kernel_stop_ts === 'number' && k.kernel_stop_ts > stop)
          stop = k.kernel_stop_ts;
    if (stop > 0 && stop <= dumpUs) return stop;
    const start = ts[`${kind}_start_ts`];
    if (typeof start === 'number' && start > 0 && start + execUs <= dumpUs) return start + execUs;
  }
  return dumpUs;
}

/** A bus bandwidth that says something: "nan" (no time measured), 0 and infinities do not. */
export const isBandwidth = (v: unknown): v is number => typeof v === 'number' && v > 0 && Number.isFinite(v);

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;
const count = (v: unknown) => (isCount(v) ? v : 0);
