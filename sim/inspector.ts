/**
 * What NCCL Inspector would write for a simulated job: one dump file per process
 * (`<host>-pid<pid>.log`, the plugin's name), one record per collective operation in the
 * plugin's own format (collectors/parsers/nccl_inspector_format.ts: the current plugin's v4.0 with
 * `comm_name` and `p2p_perf`), while the training hook's side, the `step` events, gains the `pid`
 * the hook sends. `collective` events are not passed on: they come from the files.
 *
 * The records follow the simulator's own emission, rank by rank and step by step: a rank that
 * emits no collective in a step (a hang) writes no record. Each simulated collective is one
 * operation (or `opsPerCollective`, whose bytes and execution times add up to it); sequence
 * numbers count per communicator and op, as NCCL's do; a communicator's hash is the same on all
 * its ranks; bus bandwidth is computed as the plugin does (inspectorComputeOpBw). Each process
 * dumps what completed every `dumpIntervalUs` from its own phase, and the record carries that
 * dump time (or, verbose, the kernel's stop time). A restart starts new processes: new pids, new
 * communicators, sequence numbers from 1.
 */
import { createHash } from 'node:crypto';
import { closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { type InspectorRecordInput, inspectorLine } from '../collectors/parsers/nccl_inspector_format.js';
import { busbwFactor } from '../detectors/slowlink/busbw.js';
import type { CollectiveEvent, RankwatchEvent } from '../schema/events.js';
import type { ClusterSim } from './cluster.js';
import { place, rankOf } from './topology.js';

export interface InspectorDumpOptions {
  /** NCCL_INSPECTOR_DUMP_DIR. */
  dir: string;
  /**
   * NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS: each process writes what completed this
   * often (default 500, the plugin README's example). A record is dated by its dump.
   */
  dumpIntervalUs?: number;
  /** NCCL_INSPECTOR_DUMP_VERBOSE=1: records carry their kernel's start and stop times. */
  verbose?: boolean;
  /** Operations each simulated collective is reported as (default 1): gradient buckets, micro-batches. */
  opsPerCollective?: number;
}

/** The plugin's names for the contract's ops (ncclFuncToString). */
const FUNC: Record<CollectiveEvent['op'], string> = {
  allreduce: 'AllReduce',
  allgather: 'AllGather',
  reducescatter: 'ReduceScatter',
  alltoall: 'AllToAll',
  broadcast: 'Broadcast',
  send: 'Send',
  recv: 'Recv',
};

interface Comm {
  id: string;
  name: string;
  nnodes: number;
}

interface DumpFile {
  path: string;
  fd?: number;
  /** Lines not written yet, with their dump time (µs), in dump order. */
  queue: { dumpUs: number; line: string }[];
  phaseUs: number;
}

export class InspectorDumps {
  /** Records written so far, and the files they went to. */
  records = 0;
  readonly files = new Set<string>();
  private readonly dumpUs: number;
  private readonly ops: number;
  /** A restart starts new processes: everything below is per epoch. */
  private epoch = 0;
  private readonly comms = new Map<string, Comm>();
  private readonly seqs = new Map<string, number>();
  private readonly byProcess = new Map<string, DumpFile>();
  private readonly pids = new Map<string, number>();
  /** Each rank's last step end (its clock), to place split operations inside the step. */
  private readonly lastEnd = new Map<number, number>();
  /** Members of communicators the layout does not name, in the order they were first seen. */
  private readonly seen = new Map<string, number[]>();

  constructor(
    private readonly sim: ClusterSim,
    private readonly o: InspectorDumpOptions,
  ) {
    this.dumpUs = Math.max(1, o.dumpIntervalUs ?? 500);
    this.ops = Math.max(1, Math.floor(o.opsPerCollective ?? 1));
    mkdirSync(o.dir, { recursive: true });
  }

  /** One simulated event in; what the hook sends out (steps with their pid), or nothing (collectives go to the files). */
  take(e: RankwatchEvent): RankwatchEvent | undefined {
    if (e.kind === 'collective') {
      this.collective(e);
      return undefined;
    }
    if (e.kind === 'job_event' && e.event === 'restart') {
      this.epoch++;
      this.comms.clear();
      this.seqs.clear();
      this.lastEnd.clear();
      this.seen.clear();
    }
    if (e.kind === 'step') {
      this.lastEnd.set(e.rank, e.ts);
      return { ...e, pid: this.pidOf(e.host, e.gpu) };
    }
    return e;
  }

  /** The process id of a host's GPU in this epoch: drawn per host from the seed, torchrun's workers in GPU order. */
  pidOf(host: string, gpu: number): number {
    const k = `${this.epoch}/${host}`;
    let base = this.pids.get(k);
    if (base === undefined) {
      base = 10_000 + (hash32(`${this.sim.opts.seed}/pid/${k}`) % 3_000_000);
      this.pids.set(k, base);
    }
    return base + gpu;
  }

  /** Writes the records dumped by `untilMs` (event time) to their files (every one when omitted); returns the files written. */
  flush(untilMs = Number.POSITIVE_INFINITY): string[] {
    const until = untilMs * 1000;
    const written: string[] = [];
    for (const f of this.byProcess.values()) {
      let n = 0;
      while (n < f.queue.length && f.queue[n].dumpUs <= until) n++;
      if (n === 0) continue;
      const text = `${f.queue
        .slice(0, n)
        .map((q) => q.line)
        .join('\n')}\n`;
      f.queue.splice(0, n);
      f.fd ??= openSync(f.path, 'w');
      writeSync(f.fd, text);
      written.push(f.path);
    }
    return written;
  }

  /** Writes what is left and closes the files. */
  close(): void {
    this.flush();
    for (const f of this.byProcess.values()) if (f.fd !== undefined) closeSync(f.fd);
    this.byProcess.clear();
  }

  private collective(e: CollectiveEvent): void {
    const gpu = e.gpu ?? 0;
    const pid = this.pidOf(e.host, gpu);
    const file = this.file(e.host, pid);
    const p2p = e.op === 'send' || e.op === 'recv';
    // ProcessGroupNCCL runs send/recv on a two-rank communicator per pair.
    const lo = p2p ? Math.min(e.rank, e.peer ?? e.rank) : 0;
    const hi = p2p ? Math.max(e.rank, e.peer ?? e.rank) : 0;
    const comm = this.comm(p2p ? `p2p.${lo}-${hi}` : e.comm, p2p ? [lo, hi] : this.members(e));
    const nranks = p2p ? 2 : (e.nranks ?? 1);
    const commRank = p2p ? (e.rank === lo ? 0 : 1) : this.commRank(e);
    const func = FUNC[e.op];
    const k = this.ops;
    const span = Math.max(k, e.ts - (this.lastEnd.get(e.rank) ?? e.ts - this.sim.opts.stepMs));
    let bytesLeft = e.bytes;
    let usBefore = 0;
    for (let i = 0; i < k; i++) {
      const bytes = i < k - 1 ? Math.floor(e.bytes / k) : bytesLeft;
      bytesLeft -= bytes;
      // Whole microseconds, adding up to the simulated duration.
      const usUpTo = Math.round((e.dur_ms * 1000 * (i + 1)) / k);
      const execUs = usUpTo - usBefore;
      usBefore = usUpTo;
      // The last operation ends at the simulated time; the others spread back over the step.
      const endUs = Math.round((e.ts - ((k - 1 - i) * span) / (k + 1)) * 1000);
      const seqKey = `${comm.id}/${commRank}/${func}`;
      const seq = (this.seqs.get(seqKey) ?? 0) + 1;
      this.seqs.set(seqKey, seq);
      const dumpUs = file.phaseUs + Math.ceil((endUs - file.phaseUs) / this.dumpUs) * this.dumpUs;
      // inspectorComputeOpBw: all-gather and reduce-scatter move their message from every rank.
      const traffic = e.op === 'allgather' || e.op === 'reducescatter' ? bytes * nranks : bytes;
      const algobw = execUs > 0 ? traffic / 1e9 / (execUs / 1e6) : 0;
      const rec: InspectorRecordInput = {
        comm: comm.id,
        commName: comm.name,
        commRank,
        nranks,
        nnodes: comm.nnodes,
        hostname: e.host,
        pid,
        dumpUs,
        func,
        seq,
        bytes,
        execUs,
        algobwGbs: algobw,
        busbwGbs: algobw * busbwFactor(e.op, nranks),
      };
      if (p2p) rec.peer = 1 - commRank;
      if (this.o.verbose)
        rec.verbose = { startUs: endUs - execUs - 12, kernelStartUs: endUs - execUs, kernelStopUs: endUs };
      file.queue.push({ dumpUs, line: inspectorLine(rec) });
      this.records++;
    }
  }

  private file(host: string, pid: number): DumpFile {
    const k = `${host}/${pid}`;
    let f = this.byProcess.get(k);
    if (!f) {
      const path = join(this.o.dir, `${host}-pid${pid}.log`);
      f = { path, queue: [], phaseUs: hash32(`${this.sim.opts.seed}/phase/${k}`) % this.dumpUs };
      this.byProcess.set(k, f);
      this.files.add(path);
    }
    return f;
  }

  /** A communicator of this epoch: its hash (NCCL's commHash, printed "0x%lx"), name and hosts. */
  private comm(name: string, members: number[]): Comm {
    let c = this.comms.get(name);
    if (!c) {
      const hex = createHash('sha256').update(`${this.sim.opts.job}/${this.epoch}/${name}`).digest('hex');
      const hosts = new Set(members.map((r) => this.sim.places[r]?.host));
      c = { id: `0x${BigInt(`0x${hex.slice(0, 16)}`).toString(16)}`, name, nnodes: hosts.size };
      this.comms.set(name, c);
    }
    return c;
  }

  private members(e: CollectiveEvent): number[] {
    return commMembers(this.sim, e, this.seen);
  }

  /** The rank's place in its communicator (torch.distributed.new_group ranks members in global-rank order). */
  private commRank(e: CollectiveEvent): number {
    return this.members(e).indexOf(e.rank);
  }
}

/**
 * A collective communicator's global ranks in order: the simulator's data- and tensor-parallel
 * groups from its layout, any other in the order its ranks first report (kept in `seen`).
 */
export function commMembers(
  sim: ClusterSim,
  e: CollectiveEvent,
  seen = new Map<string, number[]>(),
): number[] {
  const l = sim.layout;
  const p = place(e.rank, l);
  if (e.comm.startsWith('dp.')) return Array.from({ length: l.dp }, (_, d) => rankOf(p.tp, d, p.stage, l));
  if (e.comm.startsWith('tp.')) return Array.from({ length: l.tp }, (_, t) => rankOf(t, p.dp, p.stage, l));
  const known = seen.get(e.comm) ?? [];
  seen.set(e.comm, known);
  if (!known.includes(e.rank)) known.push(e.rank);
  return known;
}

function hash32(s: string): number {
  return createHash('sha256').update(s).digest().readUInt32BE(0);
}
