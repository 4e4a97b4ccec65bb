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

/** What the detectors produced since the last take. */
export interface DetectorOutput {
  findings: Finding[];
  mfu: MfuPoint[];
  rollups: StepRollup[];
}
