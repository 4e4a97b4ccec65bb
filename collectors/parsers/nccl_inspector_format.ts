/**
 * Writes NCCL Inspector dump lines the way the plugin does (inspector_json.cc and json.cc at
 * NVIDIA/nccl 5067397c: compact JSON, its key order, doubles as `%lf`, NaN as "nan"), so tests,
 * benchmarks and the simulator can make the files `collect --nccl-inspector` reads. The parser
 * tests check it reproduces a real line byte for byte.
 */

export interface InspectorRecordInput {
  comm: string;
  /** NCCL 2.30 and later print it; earlier versions have no such key. */
  commName?: string;
  commRank: number;
  nranks: number;
  nnodes: number;
  hostname: string;
  pid: number;
  dumpUs: number;
  /** ncclFuncToString's name: AllReduce, AllGather, ReduceScatter, Broadcast, Send, Recv… */
  func: string;
  seq: number;
  bytes: number;
  execUs: number;
  /** send/recv: the peer's rank in the communicator. */
  peer?: number;
  algobwGbs: number;
  busbwGbs: number;
  version?: string;
  gitRev?: string;
  timing?: 'kernel_gpu' | 'kernel_cpu' | 'collective_cpu';
  /** Verbose mode (NCCL_INSPECTOR_DUMP_VERBOSE=1): the CPU start and one channel's kernel times. */
  verbose?: { startUs: number; kernelStartUs: number; kernelStopUs: number };
}

const P2P = new Set(['Send', 'Recv']);

/** One dump line (no newline). */
export function inspectorLine(r: InspectorRecordInput): string {
  const p = P2P.has(r.func) ? 'p2p' : 'coll';
  const header =
    `{"id":${str(r.comm)}${r.commName !== undefined ? `,"comm_name":${str(r.commName)}` : ''}` +
    `,"rank":${r.commRank},"n_ranks":${r.nranks},"nnodes":${r.nnodes}}`;
  const metadata =
    `{"inspector_output_format_version":${str(r.version ?? 'v4.0')},"git_rev":${str(r.gitRev ?? '')}` +
    `,"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":${r.dumpUs}` +
    `,"hostname":${str(r.hostname)},"pid":${r.pid}}`;
  let perf =
    `{"${p}":${str(r.func)},"${p}_sn":${r.seq}${p === 'p2p' ? `,"p2p_peer":${r.peer ?? 0}` : ''}` +
    `,"${p}_msg_size_bytes":${r.bytes},"${p}_exec_time_us":${Math.round(r.execUs)}` +
    `,"${p}_timing_source":${str(r.timing ?? 'kernel_gpu')}` +
    `,"${p}_algobw_gbs":${lf(r.algobwGbs)},"${p}_busbw_gbs":${lf(r.busbwGbs)}`;
  if (r.verbose) {
    const v = r.verbose;
    perf +=
      `,"event_trace_sn":{"${p}_start_sn":1,"${p}_stop_sn":2,"kernel_events":[{"channel_id":0,"kernel_start_sn":3,"kernel_stop_sn":5,"kernel_record_sn":4}]}` +
      `,"event_trace_ts":{"${p}_start_ts":${v.startUs},"${p}_stop_ts":${v.startUs + 5},"kernel_events":[{"channel_id":0,` +
      `"kernel_start_ts":${v.kernelStartUs},"kernel_stop_ts":${v.kernelStopUs},"kernel_record_ts":${v.kernelStopUs}}]}`;
  }
  return `{"header":${header},"metadata":${metadata},"${p}_perf":${perf}}}`;
}

/** `%lf`: six decimals; NaN as the plugin's "nan" string. */
const lf = (x: number) => (Number.isNaN(x) ? '"nan"' : x.toFixed(6));
const str = (s: string) => JSON.stringify(s);
