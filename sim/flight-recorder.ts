/**
 * What PyTorch's Flight Recorder analyzer would print for a simulated job that hangs
 * (`python -m torch.distributed.flight_recorder.fr_trace DIR`, also `torchfrtrace`): for each
 * process group whose next collective some ranks never joined, the block `error_analysis` logs
 * (pytorch/pytorch torch/distributed/flight_recorder/components/utils.py and EntryState.log in
 * components/types.py, logger format "%(message)s"):
 *
 *     Not all ranks joining collective, sequence number: 42
 *     internal record id: 41
 *     group info: 3:dp.s0.t1
 *     collective: nccl:all_reduce
 *     missing ranks: {9}
 *     input sizes: [[2206250000]]
 *     output sizes: [[2206250000]]
 *     world size: 8
 *     expected ranks: {1, 9, 17, 25, 33, 41, 49, 57}
 *     collective state: scheduled
 *     collective stack trace:
 *      <frames>
 *
 * The analyzer reads the dumps the ranks write when their watchdogs fire (or on demand), so the
 * report is what they held then: each waiting rank's last entry is the collective it entered and
 * never completed, the one its `nccl_timeout` names (process group, SeqNum). For each process group
 * some members wait in, the members that never entered that collective are missing: the hung rank,
 * and also ranks stuck earlier in another collective (the analyzer prints those too; the hang
 * detector tells them apart: they joined a collective elsewhere). Point-to-point waits are not
 * printed (the analyzer matches them apart). The report is taken before the job restarts (the
 * restart starts new process groups); a hang that never reached the watchdog wrote no dump and
 * prints nothing. Sets are printed sorted.
 */
import type { CollectiveEvent, RankwatchEvent } from '../schema/events.js';
import type { ClusterSim } from './cluster.js';
import { commMembers } from './inspector.js';

interface CommState {
  op: CollectiveEvent['op'];
  bytes: number;
  members: number[];
}

/** A waiting rank's last entry, as its watchdog timeout names it. */
interface Entered {
  rank: number;
  pg: string;
  comm: string;
  seq: number;
}

/** The analyzer's profiling names (ProcessGroupNCCL's `nccl:` + op). */
const PROFILING: Partial<Record<CollectiveEvent['op'], string>> = {
  allreduce: 'nccl:all_reduce',
  allgather: 'nccl:_allgather_base',
  reducescatter: 'nccl:_reduce_scatter_base',
  broadcast: 'nccl:broadcast',
  alltoall: 'nccl:all_to_all',
};

export class FlightRecorderReport {
  private readonly comms = new Map<string, CommState>();
  private readonly seen = new Map<string, number[]>();
  private entered: Entered[] = [];
  /** The report of the dumps written before a restart. */
  private dumped?: string;

  constructor(private readonly sim: ClusterSim) {}

  /** One simulated event in (collectives and watchdog timeouts are what it reads); a restart starts new process groups. */
  take(e: RankwatchEvent): void {
    if (e.kind === 'job_event' && e.event === 'restart') {
      if (this.entered.length) this.dumped ??= this.render();
      this.comms.clear();
      this.seen.clear();
      this.entered = [];
      return;
    }
    if (e.kind === 'fault' && e.source === 'nccl_timeout') {
      const t = e as typeof e & { pg?: string; pg_name?: string; seq?: number; op?: string };
      if (t.rank !== undefined && t.pg_name && t.seq !== undefined && t.op !== 'RECV' && t.op !== 'SEND')
        this.entered.push({ rank: t.rank, pg: t.pg ?? '?', comm: t.pg_name, seq: t.seq });
      return;
    }
    if (e.kind !== 'collective' || e.op === 'send' || e.op === 'recv' || this.comms.has(e.comm)) return;
    this.comms.set(e.comm, { op: e.op, bytes: e.bytes, members: commMembers(this.sim, e, this.seen) });
  }

  /** The analyzer's report: one block per process group waiting on ranks that never joined ('' when none). */
  text(): string {
    return this.dumped ?? (this.entered.length ? this.render() : '');
  }

  private render(): string {
    const byComm = new Map<string, Entered[]>();
    for (const x of this.entered) byComm.set(x.comm, [...(byComm.get(x.comm) ?? []), x]);
    const blocks: string[] = [];
    for (const [name, waits] of byComm) {
      const c = this.comms.get(name);
      if (!c) continue;
      const seq = Math.max(...waits.map((w) => w.seq));
      const joined = new Set(waits.filter((w) => w.seq === seq).map((w) => w.rank));
      const missing = c.members.filter((r) => !joined.has(r));
      if (missing.length === 0) continue;
      const numel = Math.round(c.bytes / 2); // bf16
      blocks.push(
        [
          `Not all ranks joining collective, sequence number: ${seq}`,
          `internal record id: ${seq - 1}`,
          `group info: ${waits[0].pg}:${name}`,
          `collective: ${PROFILING[c.op] ?? `nccl:${c.op}`}`,
          `missing ranks: ${pySet(missing)}`,
          `input sizes: [[${numel}]]`,
          `output sizes: [[${numel}]]`,
          `world size: ${c.members.length}`,
          `expected ranks: ${pySet(c.members)}`,
          'collective state: scheduled',
          'collective stack trace: ',
          ' ',
        ].join('\n'),
      );
    }
    return blocks.length ? `${blocks.join('\n')}\n` : '';
  }
}

/** A Python set of ints as `str()` prints it. */
const pySet = (xs: number[]) => `{${[...xs].sort((a, b) => a - b).join(', ')}}`;
