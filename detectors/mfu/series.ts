/** MFU of a job, one point per step, from the step's wall time and the job's model FLOPs. */
import type { JobEvent } from '../../schema/events.js';
import type { StepFrame } from '../steps.js';
import { DEFAULT_CONVENTION, type FlopConvention, flopsPerToken } from './flops.js';
import { findGpu, peakFlops } from './peaks.js';

export interface MfuPoint {
  job: string;
  step: number;
  ts: number;
  step_ms: number;
  tokens: number;
  tflops_per_gpu: number;
  mfu: number;
}

export class MfuSeries {
  private flopsPerStep: number | undefined;
  private flopsPerToken: number | undefined;
  private peak: number | undefined;
  private world = 0;
  private tokens = 0;
  private sumFlops = 0;
  private sumSeconds = 0;
  last: MfuPoint | undefined;

  constructor(
    private readonly job: string,
    private readonly convention: FlopConvention = DEFAULT_CONVENTION,
  ) {}

  configure(meta: JobEvent): void {
    this.world = meta.world_size;
    this.flopsPerStep = meta.flops_per_step;
    this.flopsPerToken = meta.model ? flopsPerToken(meta.model, this.convention) : undefined;
    this.tokens = meta.global_batch_tokens ?? 0;
    this.peak = findGpu(meta.gpu_model) ? safePeak(meta.gpu_model, meta.dtype) : undefined;
  }

  /** Returns the step's MFU point, or undefined when the job's FLOPs or GPU are unknown. */
  process(f: StepFrame, stepMs: number): MfuPoint | undefined {
    if (!this.peak || !this.world || !(stepMs > 0)) return undefined;
    // Tokens per step: the job's global batch, or what the ranks report.
    const tokens = this.tokens || f.tokens;
    const flops = this.flopsPerStep ?? (this.flopsPerToken ?? 0) * tokens;
    if (!(flops > 0)) return undefined;
    const perGpu = flops / (stepMs / 1000) / this.world;
    this.sumFlops += flops;
    this.sumSeconds += stepMs / 1000;
    this.last = {
      job: this.job,
      step: f.step,
      ts: f.ts,
      step_ms: stepMs,
      tokens,
      tflops_per_gpu: perGpu / 1e12,
      mfu: perGpu / this.peak,
    };
    return this.last;
  }

  /** MFU over every step seen: total model FLOPs over total wall time. */
  overall(): number | undefined {
    if (!this.peak || !this.world || this.sumSeconds === 0) return undefined;
    return this.sumFlops / this.sumSeconds / this.world / this.peak;
  }
}

function safePeak(model: string, dtype: string): number | undefined {
  try {
    return peakFlops(model, dtype);
  } catch {
    return undefined;
  }
}
