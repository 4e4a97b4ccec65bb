/**
 * What one job's ranks last did, for the hang detector: each rank's last step or collective, its
 * GPU's last sample (idle or busy, since when) and, per communicator and operation, the sequence
 * number of its last collective. Typed arrays indexed by global rank, so the state is O(ranks),
 * never O(steps seen), and each event costs a few array writes.
 */
import type { CollectiveEvent, GpuEvent } from '../../schema/events.js';
import { grown } from '../arrays.js';

/** A GPU sample's verdict: no sample yet, idle, busy, or in between. */
export const NO_SAMPLE = 0;
export const IDLE = 1;
export const BUSY = 2;
export const UNSURE = 3;

/** NVML's "GPU idle" clock-event reason: nothing runs on it. */
const GPU_IDLE_REASON = 0x1;

/** Point-to-point operations: each rank counts its own, so their sequence numbers are not compared. */
const P2P = new Set(['send', 'recv']);

/**
 * Communicator-operations a rank's sequence numbers are kept for (a Megatron rank's collectives:
 * its data- and tensor-parallel groups' all-reduces, all-gathers, reduce-scatters); more are
 * counted and left out. A slot holds an id below EMPTY_SLOT.
 */
export const SLOTS = 4;
export const EMPTY_SLOT = 0xffff;

/**
 * Idle when NVML says nothing ran (utilisation ≤ 10%, or no utilisation but the idle reason bit),
 * busy at ≥ 50%: a rank waiting in NCCL spins its kernels at 100%, a hung rank's GPU goes idle.
 */
export function gpuVerdict(e: GpuEvent): number {
  const util = e.util_pct;
  if (util !== undefined) return util >= 50 ? BUSY : util <= 10 ? IDLE : UNSURE;
  return e.throttle_reasons & GPU_IDLE_REASON ? IDLE : BUSY;
}

export class JobProgress {
  private capacity = 0;
  host: string[] = [];
  gpu = new Int16Array(0);
  /** Event time of each rank's last step or collective (0: none yet). */
  lastTs = new Float64Array(0);
  lastStep = new Int32Array(0);
  gpuTs = new Float64Array(0);
  gpuState = new Uint8Array(0);
  /** Start of the current run of idle samples (meaningful while gpuState is IDLE). */
  idleSince = new Float64Array(0);
  util = new Float32Array(0);
  power = new Float32Array(0);
  /** Latest report of any rank, the highest step reported and when it first came. */
  maxTs = 0;
  maxStep = -1;
  maxStepTs = 0;
  /** Highest step any step or collective report named. */
  frontStep = -1;
  /** Smoothed time between the job's steps; 0 until two steps came. */
  typicalMs = 0;
  stepsSeen = 0;
  /** Smoothed time between one GPU's samples. */
  sampleGapMs = 0;
  /** Latest event of any kind for the job (GPU samples included). */
  lastEventTs = 0;
  /**
   * Sequence numbers: each communicator-operation (a communicator's all-reduces, say) has an id,
   * its highest sequence number and its member count; each rank has SLOTS slots of (id, its last
   * sequence number), so the cost per rank is fixed whatever the communicators are called.
   */
  private readonly opIds = new Map<string, (string | number)[]>();
  /** The communicator as events name it, and as findings name it (with the source's name for it). */
  readonly opKey: string[] = [];
  readonly opComm: string[] = [];
  readonly opName: string[] = [];
  readonly opMax: number[] = [];
  readonly opMembers: number[] = [];
  slotOp = new Uint16Array(0);
  slotSeq = new Float64Array(0);
  /** Communicator-operations or rank slots left out (past `maxComms`, or SLOTS per rank). */
  dropped = 0;

  constructor(private readonly maxComms: number) {}

  /** Ranks this job has arrays for (every rank seen is below it). */
  get size(): number {
    return this.capacity;
  }

  step(rank: number, host: string, gpu: number, step: number, ts: number): void {
    this.place(rank, host, gpu, ts);
    if (ts > this.lastTs[rank]) this.lastTs[rank] = ts;
    if (step > this.lastStep[rank]) this.lastStep[rank] = step;
    if (ts > this.maxTs) this.maxTs = ts;
    if (step > this.frontStep) this.frontStep = step;
    if (step <= this.maxStep) return;
    const gap = ts - this.maxStepTs;
    if (this.maxStep >= 0 && gap > 0) {
      // Clipped to 4x either way, so one checkpoint or stall cannot move it far.
      const t = this.typicalMs;
      this.typicalMs = t === 0 ? gap : t + 0.1 * (Math.min(4 * t, Math.max(t / 4, gap)) - t);
    }
    this.maxStep = step;
    this.maxStepTs = ts;
    this.stepsSeen++;
  }

  /**
   * A collective report. It is progress when it shows operations done: a higher sequence number
   * than the rank's last for that communicator and operation, or, without one, a whole step or
   * interval. A snapshot of a step still running (`window: 'open'`, sent while a step runs long,
   * as in a hang) moves the rank's own last report only: when in its window the operations were
   * done is not known, so it does not restart the job's stall clock or name a new step.
   */
  collective(e: CollectiveEvent, seq: number | undefined, window: unknown): void {
    const r = e.rank;
    this.place(r, e.host, e.gpu ?? -1, e.ts);
    const advanced = seq === undefined || P2P.has(e.op) ? window !== 'open' : this.seq(r, e, seq);
    if (!advanced) return;
    if (e.ts > this.lastTs[r]) this.lastTs[r] = e.ts;
    if (window === 'open') return;
    if (e.ts > this.maxTs) this.maxTs = e.ts;
    if (window !== 'interval' && e.step > this.frontStep) this.frontStep = e.step;
  }

  /** Records a rank's sequence number; whether it moved (a first one counts as moved). */
  private seq(r: number, e: CollectiveEvent, seq: number, shown?: string): boolean {
    if (this.slotOp.length < this.capacity * SLOTS) {
      this.slotOp = grown(this.slotOp, this.capacity * SLOTS, EMPTY_SLOT);
      this.slotSeq = grown(this.slotSeq, this.capacity * SLOTS);
    }
    const base = r * SLOTS;
    // The rank's own slots first: comparing a few short strings beats hashing the event's new one.
    let k = base;
    for (; k < base + SLOTS; k++) {
      const at = this.slotOp[k];
      if (at === EMPTY_SLOT) break;
      if (this.opKey[at] !== e.comm || this.opName[at] !== e.op) continue;
      if (seq <= this.slotSeq[k]) return false;
      this.slotSeq[k] = seq;
      if (seq > this.opMax[at]) this.opMax[at] = seq;
      return true;
    }
    if (k === base + SLOTS) {
      this.dropped++;
      return true;
    }
    const id = this.opId(e.comm, e.op, shown ?? commShown(e.comm, (e as { comm_name?: unknown }).comm_name));
    if (id < 0) return true;
    this.slotOp[k] = id;
    this.slotSeq[k] = seq;
    this.opMembers[id]++;
    if (seq > this.opMax[id]) this.opMax[id] = seq;
    return true;
  }

  /** Whether any collective carried a sequence number. */
  get hasSeqs(): boolean {
    return this.opMax.length > 0;
  }

  private opId(comm: string, op: string, shown: string): number {
    // Per communicator, its few operations and their ids side by side: a scan beats a second Map.
    let ops = this.opIds.get(comm);
    if (!ops) {
      if (this.opMax.length >= Math.min(this.maxComms, EMPTY_SLOT)) {
        this.dropped++;
        return -1;
      }
      ops = [];
      this.opIds.set(comm, ops);
    }
    for (let i = 0; i < ops.length; i += 2) if (ops[i] === op) return ops[i + 1] as number;
    if (this.opMax.length >= Math.min(this.maxComms, EMPTY_SLOT)) {
      this.dropped++;
      return -1;
    }
    const id = this.opMax.length;
    ops.push(op, id);
    this.opKey.push(comm);
    this.opComm.push(shown);
    this.opName.push(op);
    this.opMax.push(Number.NEGATIVE_INFINITY);
    this.opMembers.push(0);
    return id;
  }

  gpuSample(rank: number, e: GpuEvent): void {
    this.place(rank, e.host, e.gpu, e.ts);
    const prev = this.gpuTs[rank];
    const gap = e.ts - prev;
    if (prev > 0 && gap > 0 && gap < 300_000)
      this.sampleGapMs = this.sampleGapMs === 0 ? gap : this.sampleGapMs + 0.01 * (gap - this.sampleGapMs);
    if (e.ts < prev) return;
    const v = gpuVerdict(e);
    if (v === IDLE && this.gpuState[rank] !== IDLE) this.idleSince[rank] = e.ts;
    this.gpuState[rank] = v;
    this.gpuTs[rank] = e.ts;
    this.util[rank] = e.util_pct ?? Number.NaN;
    this.power[rank] = e.power_w ?? Number.NaN;
  }

  /**
   * A GPU's state as a shard saw it (detectors/hang/shard-signs.ts): its latest sample's time and
   * verdict, since when idle, utilisation and power (NaN: not given).
   */
  setGpu(
    rank: number,
    host: string,
    gpu: number,
    ts: number,
    verdict: number,
    idleSince: number,
    util: number,
    power: number,
  ): void {
    this.place(rank, host, gpu, ts);
    if (verdict === IDLE) this.idleSince[rank] = idleSince;
    this.gpuState[rank] = verdict;
    this.gpuTs[rank] = ts;
    this.util[rank] = util;
    this.power[rank] = power;
  }

  /**
   * A rank's collective progress as a shard saw it: its last report's time and step (-1: none),
   * and its sequence numbers per communicator-operation (communicator, operation, number, and the
   * name findings give the communicator).
   */
  setRank(
    rank: number,
    host: string,
    gpu: number,
    lastTs: number,
    lastStep: number,
    seqs: [string, string, number, string][],
  ): void {
    this.place(rank, host, gpu, lastTs);
    if (lastTs > this.lastTs[rank]) this.lastTs[rank] = lastTs;
    if (lastStep > this.lastStep[rank]) this.lastStep[rank] = lastStep;
    for (const [comm, op, seq, name] of seqs) this.seq(rank, { comm, op } as CollectiveEvent, seq, name);
  }

  /** A shard's collectives moved the job on (its latest report and step): what a collective does to the whole job. */
  collectiveFront(maxTs: number, frontStep: number): void {
    if (maxTs > this.maxTs) this.maxTs = maxTs;
    if (frontStep > this.frontStep) this.frontStep = frontStep;
  }

  /** Notes an event of the job that says nothing of progress (a fault). */
  touch(ts: number): void {
    if (ts > this.lastEventTs) this.lastEventTs = ts;
  }

  /** Whether the rank was seen (a step, a collective or a GPU sample). */
  known(rank: number): boolean {
    return rank >= 0 && rank < this.capacity && this.host[rank] !== undefined;
  }

  private place(rank: number, host: string, gpu: number, ts: number): void {
    if (rank >= this.capacity) this.grow(Math.max(rank + 1, this.capacity * 2, 64));
    if (this.host[rank] !== host) this.host[rank] = host;
    if (gpu >= 0) this.gpu[rank] = gpu;
    if (ts > this.lastEventTs) this.lastEventTs = ts;
  }

  private grow(capacity: number): void {
    this.gpu = grown(this.gpu, capacity, -1);
    this.lastTs = grown(this.lastTs, capacity);
    this.lastStep = grown(this.lastStep, capacity, -1);
    this.gpuTs = grown(this.gpuTs, capacity);
    this.gpuState = grown(this.gpuState, capacity);
    this.idleSince = grown(this.idleSince, capacity);
    this.util = grown(this.util, capacity, Number.NaN);
    this.power = grown(this.power, capacity, Number.NaN);
    // Filled, not `length =`: a long holey array can fall back to slow dictionary elements.
    for (let i = this.host.length; i < capacity; i++) this.host.push(undefined as unknown as string);
    this.capacity = capacity;
  }
}

/** A communicator as findings name it: its id, with the source's name for it. */
function commShown(comm: string, name: unknown): string {
  return typeof name === 'string' && name !== '' ? `${comm} (${name})` : comm;
}
