/**
 * Assembles per-rank `step` events into one frame per step: every rank's compute, comm wait
 * and wall time side by side, which is what peer-relative detectors need. A frame closes when
 * every rank has reported, or when event time has moved `latenessMs` past its first report.
 * Frames are pooled; memory is O(ranks x open steps), never O(steps seen). A rank reporting a
 * step twice (redelivery) or after its frame closed is counted and ignored.
 */

import type { StepEvent } from '../schema/events.js';
import { grown } from './arrays.js';

export interface StepFrame {
  step: number;
  /** Latest event time among the frame's reports. */
  ts: number;
  firstTs: number;
  /** Ranks that reported. */
  count: number;
  seen: Uint8Array;
  compute: Float64Array;
  commWait: Float64Array;
  stepMs: Float64Array;
  tokens: number;
}

export interface RankInfo {
  host: string[];
  gpu: Int16Array;
  stage: Int16Array;
}

export class RankTable implements RankInfo {
  size = 0;
  host: string[] = [];
  gpu = new Int16Array(0);
  stage = new Int16Array(0);
  /** Ranks per pipeline stage, kept sorted. */
  stageMembers: number[][] = [];
  /** Hosts' GPU counts as seen in reports. */
  readonly ranksOnHost = new Map<string, number>();
  /** One string per host that every rank on it shares (each event parses its own copy). */
  private readonly hostNames = new Map<string, string>();

  constructor(capacity: number) {
    this.grow(capacity);
  }

  ensure(rank: number): void {
    if (rank >= this.gpu.length) this.grow(Math.max(rank + 1, this.gpu.length * 2));
  }

  private grow(capacity: number): void {
    this.gpu = grown(this.gpu, capacity, -1);
    this.stage = grown(this.stage, capacity, -1);
    // Filled, not `length =`: a long holey array can fall back to slow dictionary elements.
    for (let i = this.host.length; i < capacity; i++) this.host.push(undefined as unknown as string);
  }

  /** Records where a rank runs; returns true when it is new or moved. */
  learn(rank: number, host: string, gpu: number, stage: number): boolean {
    this.ensure(rank);
    if (this.host[rank] === host && this.gpu[rank] === gpu && this.stage[rank] === stage) return false;
    if (this.host[rank] === undefined) {
      this.size = Math.max(this.size, rank + 1);
      this.ranksOnHost.set(host, (this.ranksOnHost.get(host) ?? 0) + 1);
    }
    const oldStage = this.stage[rank];
    if (oldStage >= 0) this.stageMembers[oldStage] = this.stageMembers[oldStage].filter((r) => r !== rank);
    let name = this.hostNames.get(host);
    if (name === undefined) {
      name = host;
      this.hostNames.set(host, name);
    }
    this.host[rank] = name;
    this.gpu[rank] = gpu;
    this.stage[rank] = stage;
    while (this.stageMembers.length <= stage) this.stageMembers.push([]);
    // Kept sorted by insertion: ranks mostly arrive in order, and a sort per new rank is quadratic.
    const members = this.stageMembers[stage];
    let lo = 0;
    let hi = members.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (members[mid] < rank) lo = mid + 1;
      else hi = mid;
    }
    const i = lo;
    if (i === members.length) members.push(rank);
    else members.splice(i, 0, rank);
    return true;
  }
}

export interface AssemblerConfig {
  latenessMs: number;
  maxOpenSteps: number;
}

export const ASSEMBLER_DEFAULTS: AssemblerConfig = { latenessMs: 10_000, maxOpenSteps: 8 };

export class StepAssembler {
  private readonly open = new Map<number, StepFrame>();
  private readonly pool: StepFrame[] = [];
  private lastClosed = -1;
  private maxTs = 0;
  duplicates = 0;
  late = 0;

  constructor(
    private capacity: number,
    /** Expected reports per step (world size), 0 when unknown. */
    public expected: number,
    private readonly cfg: AssemblerConfig = ASSEMBLER_DEFAULTS,
  ) {}

  /** Adds a report; returns frames that closed, oldest first (the caller hands them back with `release`). */
  add(e: StepEvent, closed: StepFrame[]): void {
    if (e.ts > this.maxTs) this.maxTs = e.ts;
    if (e.step <= this.lastClosed) {
      this.late++;
      return;
    }
    let f = this.open.get(e.step);
    if (!f) {
      f = this.frame(e.step, e.ts);
      this.open.set(e.step, f);
    }
    if (e.rank >= this.capacity) this.resize(e.rank + 1);
    if (f.seen[e.rank]) {
      this.duplicates++;
      return;
    }
    f.seen[e.rank] = 1;
    f.count++;
    f.compute[e.rank] = e.compute_ms;
    f.commWait[e.rank] = e.comm_wait_ms ?? Number.NaN;
    f.stepMs[e.rank] = e.step_ms;
    f.tokens += e.tokens ?? 0;
    if (e.ts > f.ts) f.ts = e.ts;
    if (this.expected > 0 && f.count >= this.expected) this.closeThrough(e.step, closed);
    else this.closeStale(closed);
  }

  /** Closes every open frame (end of input or job). */
  flush(closed: StepFrame[]): void {
    if (this.open.size === 0) return;
    this.closeThrough(Math.max(...this.open.keys()), closed);
  }

  release(f: StepFrame): void {
    if (f.seen.length === this.capacity) this.pool.push(f);
  }

  private closeStale(closed: StepFrame[]): void {
    let through = -1;
    for (const [step, f] of this.open) {
      if (this.maxTs - f.firstTs > this.cfg.latenessMs) through = Math.max(through, step);
    }
    if (this.open.size > this.cfg.maxOpenSteps) through = Math.max(through, Math.min(...this.open.keys()));
    if (through >= 0) this.closeThrough(through, closed);
  }

  /** Closes all frames up to and including `step`, in step order. */
  private closeThrough(step: number, closed: StepFrame[]): void {
    const steps = [...this.open.keys()].filter((s) => s <= step).sort((a, b) => a - b);
    for (const s of steps) {
      closed.push(this.open.get(s)!);
      this.open.delete(s);
    }
    if (step > this.lastClosed) this.lastClosed = step;
  }

  private frame(step: number, ts: number): StepFrame {
    const f = this.pool.pop() ?? {
      step: 0,
      ts: 0,
      firstTs: 0,
      count: 0,
      seen: new Uint8Array(this.capacity),
      compute: new Float64Array(this.capacity),
      commWait: new Float64Array(this.capacity),
      stepMs: new Float64Array(this.capacity),
      tokens: 0,
    };
    f.step = step;
    f.ts = ts;
    f.firstTs = ts;
    f.count = 0;
    f.tokens = 0;
    f.seen.fill(0);
    return f;
  }

  private resize(capacity: number): void {
    this.capacity = Math.max(capacity, this.capacity * 2);
    this.pool.length = 0;
    for (const f of this.open.values()) {
      f.seen = grown(f.seen, this.capacity);
      f.compute = grown(f.compute, this.capacity);
      f.commWait = grown(f.commWait, this.capacity);
      f.stepMs = grown(f.stepMs, this.capacity);
    }
  }
}
