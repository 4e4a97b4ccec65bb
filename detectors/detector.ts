/**
 * What a detector is, for the runner that drives them all (detectors/runner.ts) and the one list
 * of them (detectors/list.ts). A detector is a pure state machine: it reads events (routed to it
 * by kind), step frames and MFU points, and writes findings to the log it was given. No I/O, no
 * clock but the events' `ts`.
 */

import type { FlopConvention } from '../mfu/flops.js';
import type { JobEvent, JobLifecycleEvent, RankwatchEvent } from '../schema/events.js';
import type { DetectorOutput, MfuPoint } from '../schema/output.js';
import type { CheckpointAdvisorConfig } from './checkpoint/advisor.js';
import type { TriageConfig } from './faults/xid.js';
import type { FindingLog, LifecycleConfig } from './findings.js';
import type { HangConfig } from './hang/hang.js';
import type { MfuDropConfig } from './mfu/drop.js';
import type { NcclCheckConfig } from './nccl_tests/nccl_tests.js';
import type { ShardReduced } from './slowlink/shard-reduce.js';
import type { SlowLinkConfig } from './slowlink/slowlink.js';
import type { StallConfig } from './stall/stall.js';
import type { AssemblerConfig, RankTable, StepFrame } from './steps.js';
import type { StragglerConfig } from './straggler/straggler.js';
import type { ThrottleConfig } from './throttle/throttle.js';

export interface DetectorConfig {
  convention: FlopConvention;
  assembler: AssemblerConfig;
  straggler: StragglerConfig;
  throttle: ThrottleConfig;
  slowLink: SlowLinkConfig;
  mfuDrop: MfuDropConfig;
  lifecycle: LifecycleConfig;
  ncclChecks: NcclCheckConfig;
  /** `checkpoint_interval` from each job's saves and interruptions (a fleet MTBF for jobs with none). */
  checkpointInterval: CheckpointAdvisorConfig;
  triage: TriageConfig;
  /** Hangs named by rank: when a job counts as stalled, how long watchdog timeouts settle. */
  hang: HangConfig;
  /** `recurring_stall`: what a stall is, and how steady its period must be. */
  stall: StallConfig;
}

export type EventKind = RankwatchEvent['kind'];

/** What the runner tells every detector: where findings go, its configuration, what it knows of jobs. */
export interface DetectorContext {
  readonly log: FindingLog;
  readonly config: DetectorConfig;
  /** The job and rank a GPU serves, learnt from the steps seen. */
  ownerOf(host: string, gpu: number): { job: string; rank: number } | undefined;
  /** A job's configuration (its `job` event), while it runs or after it ended. */
  jobMeta(job: string): JobEvent | undefined;
}

/** Hooks a detector may have; the runner calls each one it has, in the list's order. */
export interface Detector {
  /** An event of a kind the detector reads (`reads` in its list entry). */
  event?(e: RankwatchEvent): void;
  /** Event time moved on (called for every event): what must fire without an event of its own. */
  advance?(ts: number): void;
  /** A job moved on (started, restarted, finished), once the runner has applied it. */
  jobChanged?(e: JobLifecycleEvent): void;
  /** End of input or of a job: close what the detector holds open. */
  flush?(ts: number): void;
  /** Another process now owns the job's stream (DetectorRunner.forget): drop its state without a word. */
  forgetJob?(job: string): void;
}

/** A detector of one job: one per job, dropped when the job ends. */
export interface JobDetector extends Detector {
  /** A step closed on every rank (or timed out): its frame and the job's step time. */
  step?(frame: StepFrame, stepMs: number): void;
  /** A communicator's step reduced by the shards (the sharded layout's job stage). */
  reduced?(r: ShardReduced): void;
  /** The job's MFU for a closed step, after every `step` hook ran (so findings that explain it are open). */
  mfu?(point: MfuPoint): void;
  /** The job restarted: baselines from before the restart no longer hold. */
  restart?(): void;
  /** Hands out per-rank figures besides findings (the slowest-GPUs ranking), after steps and flushes. */
  figures?(out: DetectorOutput): void;
}

/**
 * Where a detector runs in the sharded layout (docs/operations.md, "Capacity"): `shard` needs only
 * its own GPUs' samples (a `detect --stage shard` owning host groups runs it); `job` needs the
 * job's steps or its whole picture (the job stage). One process runs both.
 */
export type DetectorStage = 'shard' | 'job';

export interface FleetEntry<D extends Detector = Detector> {
  /** The finding type(s) it raises, as named in docs/detectors.md. */
  readonly name: string;
  readonly scope: 'fleet';
  readonly stage: DetectorStage;
  /** Event kinds routed to `event`. */
  readonly reads: readonly EventKind[];
  create(ctx: DetectorContext): D;
}

export interface JobEntry<D extends JobDetector = JobDetector> {
  readonly name: string;
  readonly scope: 'job';
  readonly stage: DetectorStage;
  readonly reads: readonly EventKind[];
  create(job: { id: string; ranks: RankTable }, ctx: DetectorContext): D;
}

export type DetectorEntry = FleetEntry | JobEntry;
