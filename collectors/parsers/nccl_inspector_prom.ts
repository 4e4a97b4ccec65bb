/**
 * NCCL Inspector's Prometheus textfile mode (NCCL_INSPECTOR_PROM_DUMP=1): one file per GPU,
 * `nccl_inspector_metrics_<device uuid>.prom`, rewritten every dump interval (30 s at least) for
 * node_exporter's textfile collector. Two formats, both read:
 *
 * - Per operation (NCCL 2.29, plugins/profiler/inspector/inspector_prom.cc at 56a0c229): three
 *   samples per completed collective, labelled `comm_id`, `hostname`, `rank` (in the communicator),
 *   `nranks`, `gpu_device_id` ("GPU3"), `collective`, `coll_sn`, `timestamp` (UTC, seconds) and
 *   `message_size` ("4.00MB", 1024-based): read as operations, like the JSON records.
 * - Aggregated, `version="v5.1"` (NCCL 2.30): per dump, GPU, communicator name, op, message-size
 *   bucket ("4-5GB") and algorithm: the mean execution time and the geometric mean bus bandwidth
 *   of the operations in it, with no count, rank, pid or sequence number.
 */
import { collectiveOp } from './collective_op.js';
import { type CollectiveOp, type InspectorOp, isBandwidth } from './nccl_inspector.js';
import { type ParseProblem, problem } from './problems.js';
import { parsePrometheusText } from './prometheus.js';

/** One aggregate of the v5 format: what Inspector says of a dump interval's operations of one kind. */
export interface PromBucket {
  host: string;
  gpu: number;
  commName: string;
  nranks: number;
  op: CollectiveOp;
  /** The message-size bucket as printed, and its lower bound in bytes. */
  sizeBucket: string;
  bytesLow: number;
  meanExecUs: number;
  /** Geometric mean over the interval's operations (0 when none had a bandwidth). */
  busbwGbs: number;
  algoProto?: string;
  version: string;
}

export interface PromSnapshot {
  ops: InspectorOp[];
  buckets: PromBucket[];
  problems: ParseProblem[];
  ignored: Record<string, number>;
}

const UNITS: Record<string, number> = { B: 1, KB: 1024, MB: 1024 ** 2, GB: 1024 ** 3, TB: 1024 ** 4 };
const GPU = /^GPU(\d+)$/;

export function parseInspectorProm(text: string): PromSnapshot {
  const out: PromSnapshot = { ops: [], buckets: [], problems: [], ignored: {} };
  const { samples, problems } = parsePrometheusText(text);
  out.problems.push(...problems);
  const ignore = (what: string) => {
    out.ignored[what] = (out.ignored[what] ?? 0) + 1;
  };
  // Samples of one operation or bucket share every label: join them by their label set.
  const groups = new Map<
    string,
    { labels: Record<string, string>; values: Record<string, number | undefined> }
  >();
  for (const s of samples) {
    if (!s.name.startsWith('nccl_')) {
      ignore(s.name);
      continue;
    }
    const k = JSON.stringify(Object.entries(s.labels).sort(([a], [b]) => (a < b ? -1 : 1)));
    let g = groups.get(k);
    if (!g) {
      g = { labels: s.labels, values: {} };
      groups.set(k, g);
    }
    g.values[s.name] = s.value;
  }
  for (const { labels: l, values: v } of groups.values()) {
    const bad = (why: string) => out.problems.push(problem(0, why, JSON.stringify(l)));
    const name = l.collective ?? l.p2p_operation;
    const op = name === undefined ? undefined : collectiveOp(name);
    if (!op) {
      ignore(`op:${name ?? 'none'}`);
      continue;
    }
    const nranks = count(l.nranks);
    if (nranks === undefined || nranks < 1) {
      bad(`nranks "${l.nranks}" is not a rank count`);
      continue;
    }
    const p2p = l.p2p_operation !== undefined;
    const busbw = v[p2p ? 'nccl_p2p_bus_bandwidth_gbs' : 'nccl_bus_bandwidth_gbs'];
    const execUs = v[p2p ? 'nccl_p2p_exec_time_microseconds' : 'nccl_collective_exec_time_microseconds'];
    if (execUs === undefined || !(execUs >= 0) || !Number.isFinite(execUs)) {
      bad(`execution time ${String(execUs)} µs cannot be one (or its sample is missing)`);
      continue;
    }
    if (l.coll_sn !== undefined) {
      const r = perOperation(l, op, nranks, execUs, busbw);
      if (typeof r === 'string') bad(r);
      else out.ops.push(r);
      continue;
    }
    const gpu = GPU.exec(l.gpu ?? '');
    const low = bucketLow(l.message_size ?? '');
    if (!gpu || low === undefined || !l.node) {
      bad(`node "${l.node}", gpu "${l.gpu}" or message_size "${l.message_size}" unreadable`);
      continue;
    }
    out.buckets.push({
      host: l.node,
      gpu: Number(gpu[1]),
      commName: l.comm_name ?? 'unknown',
      nranks,
      op,
      sizeBucket: l.message_size,
      bytesLow: low,
      meanExecUs: execUs,
      busbwGbs: isBandwidth(busbw) ? busbw : 0,
      ...(l.algo_proto ? { algoProto: l.algo_proto } : {}),
      version: l.version ?? 'unknown',
    });
  }
  return out;
}

/** A 2.29 per-operation sample set → the same record the JSON dump gives, named by GPU, not pid. */
function perOperation(
  l: Record<string, string>,
  op: CollectiveOp,
  nranks: number,
  execUs: number,
  busbw: number | undefined,
): InspectorOp | string {
  const gpu = GPU.exec(l.gpu_device_id ?? '');
  const commRank = count(l.rank);
  const seq = count(l.coll_sn);
  const bytes = humanBytes(l.message_size ?? '');
  const t = Date.parse(l.timestamp ?? '');
  if (!gpu || !l.hostname || !l.comm_id)
    return `hostname "${l.hostname}", gpu_device_id "${l.gpu_device_id}" or comm_id missing`;
  if (commRank === undefined || commRank >= nranks)
    return `rank "${l.rank}" is not a rank of the communicator`;
  if (seq === undefined || bytes === undefined || !Number.isFinite(t))
    return `coll_sn "${l.coll_sn}", message_size "${l.message_size}" or timestamp "${l.timestamp}" unreadable`;
  return {
    host: l.hostname,
    gpu: Number(gpu[1]),
    comm: l.comm_id,
    commRank,
    nranks,
    op,
    seq,
    bytes,
    execUs,
    ...(isBandwidth(busbw) ? { busbwGbs: busbw } : {}),
    tMs: t,
  };
}

/** "512B", "4.00MB" (1024-based, two decimals: within 0.25% of the true size). */
function humanBytes(s: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)(B|KB|MB|GB|TB)$/.exec(s);
  return m ? Math.round(Number(m[1]) * UNITS[m[2]]) : undefined;
}

/** "4-5GB" → 4 GiB, "0B" → 0: the bucket's lower bound. */
function bucketLow(s: string): number | undefined {
  if (s === '0B') return 0;
  const m = /^(\d+)-(\d+)(B|KB|MB|GB|TB)$/.exec(s);
  return m ? Number(m[1]) * UNITS[m[3]] : undefined;
}

function count(s: string | undefined): number | undefined {
  return s !== undefined && /^\d{1,9}$/.test(s) ? Number(s) : undefined;
}
