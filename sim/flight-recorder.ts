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
 * The simulator reports completed collectives only, so who joined is read from who went on: a
 * rank hung when its collectives stop in a step where other ranks' still complete (the ones that
 * do not need it); every collective communicator it belongs to then waits at its next operation,
 * entered by the members still running and never by the hung ones. A job where every rank stops
 * at once names no one (as the analyzer cannot when every rank joined). Sets are printed sorted.
 */
import type { CollectiveEvent, RankwatchEvent } from '../schema/events.js';
import type { ClusterSim } from './cluster.js';
import { commMembers } from './inspector.js';

interface CommState {
  name: string;
  /** Process group name as PyTorch numbers them ("0" is the default group), in order of first use. */
  pg: string;
  op: CollectiveEvent['op'];
  bytes: number;
  members: number[];
  /** Operations each member completed. */
  done: Map<number, number>;
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
  /** Each rank's last step with a completed collective. */
  private readonly lastStep = new Map<number, number>();
  private readonly seen = new Map<string, number[]>();

  constructor(private readonly sim: ClusterSim) {}

  /** One simulated event in (collectives are what it reads); a restart starts new process groups. */
  take(e: RankwatchEvent): void {
    if (e.kind === 'job_event' && e.event === 'restart') {
      this.comms.clear();
      this.lastStep.clear();
      this.seen.clear();
      return;
    }
    if (e.kind !== 'collective' || e.op === 'send' || e.op === 'recv') return;
    let c = this.comms.get(e.comm);
    if (!c) {
      c = {
        name: e.comm,
        pg: String(this.comms.size + 1),
        op: e.op,
        bytes: e.bytes,
        members: commMembers(this.sim, e, this.seen),
        done: new Map(),
      };
      this.comms.set(e.comm, c);
    }
    c.done.set(e.rank, (c.done.get(e.rank) ?? 0) + 1);
    if (e.step > (this.lastStep.get(e.rank) ?? -1)) this.lastStep.set(e.rank, e.step);
  }

  /** The ranks whose collectives stopped before other ranks' did. */
  hungRanks(): number[] {
    let last = -1;
    for (const s of this.lastStep.values()) if (s > last) last = s;
    const hung: number[] = [];
    for (const [r, s] of this.lastStep) if (s < last) hung.push(r);
    return hung.sort((a, b) => a - b);
  }

  /** The analyzer's report: one block per process group waiting on ranks that never joined ('' when none). */
  text(): string {
    const hung = new Set(this.hungRanks());
    if (hung.size === 0) return '';
    const blocks: string[] = [];
    for (const c of this.comms.values()) {
      const missing = c.members.filter((r) => hung.has(r));
      if (missing.length === 0 || missing.length === c.members.length) continue;
      const joined = c.members.filter((r) => !hung.has(r));
      // The next operation of the group, which the running members entered.
      const seq = Math.max(...joined.map((r) => c.done.get(r) ?? 0)) + 1;
      const numel = Math.round(c.bytes / 2); // bf16
      blocks.push(
        [
          `Not all ranks joining collective, sequence number: ${seq}`,
          `internal record id: ${seq - 1}`,
          `group info: ${c.pg}:${c.name}`,
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
