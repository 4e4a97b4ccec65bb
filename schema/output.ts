/**
 * What the detectors hand out besides findings (schema/finding.ts): MFU points and per-step
 * rollups. The store, the API and the sinks read these types; the detectors produce them.
 */
import type { Finding } from './finding.js';

export interface MfuPoint {
  job: string;
  step: number;
  ts: number;
  step_ms: number;
  tokens: number;
  tflops_per_gpu: number;
  mfu: number;
  /** Set when the figure cannot be true: which input is likely wrong. */
  implausible?: string;
}

/** One stage of one step: its time, the median and slowest rank's compute, the median wait. */
export interface StepRollup {
  job: string;
  step: number;
  stage: number;
  ts: number;
  ranks: number;
  step_ms: number;
  compute_p50_ms: number;
  compute_max_ms: number;
  compute_max_rank: number;
  comm_wait_p50_ms: number;
}

/**
 * One GPU of a job's slowest-GPUs ranking (the straggler detector's chronic question): how much
 * slower than its stage peers it runs as its own level, and what replacing it would buy the job.
 */
export interface SlowGpu {
  job: string;
  /** Event time and step of the ranking. */
  ts: number;
  step: number;
  rank: number;
  host: string;
  gpu: number;
  stage: number;
  /** Its own level against its stage peers' median, percent (negative: faster). */
  slowdown_pct: number;
  /** Share of the job's throughput replacing it with a typical GPU would buy, percent. */
  cost_pct: number;
  gpu_hours_per_day: number;
  /** Steps its level was measured over. */
  steps: number;
}

/** What the detectors produced since the last take. */
export interface DetectorOutput {
  findings: Finding[];
  mfu: MfuPoint[];
  rollups: StepRollup[];
  /** The straggler detector's slowest-GPUs rankings (each a job's latest, a few GPUs). */
  slowGpus?: SlowGpu[];
  /**
   * A shard stage's records for its job stage (reduced collectives, marks; detectors/shard-stage.ts):
   * published to the internal topic before the delivery is acknowledged, never stored.
   */
  shard?: unknown[];
}

/** The repair loop's budget and breaker now (GET /v1/actions `budget`); in dry-run, `nodes_out` counts the nodes out on paper. */
export interface AutomationBudget {
  nodes_out: number;
  nodes_limit: number;
  /** Which setting sets the node limit, in the operator's words. */
  limit_by: string;
  fleet: number;
  cordons_last_hour: number;
  per_hour: number | null;
  breaker_burst: number;
  breaker_window_s: number;
  breaker_tripped_at: number | null;
  breaker_reason: string | null;
}
