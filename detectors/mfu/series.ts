/**
 * MFU of a job, one point per step, from the step's wall time and the job's model FLOPs.
 *
 * Tokens per step (design.md): the job event's `global_batch_tokens` when given; otherwise the
 * ranks' `tokens` summed and divided by tp·pp·cp, since every rank of one data-parallel replica
 * reports that replica's tokens. A frame that closed before every rank reported is scaled up by
 * world / reporting ranks, so a late rank does not show as a dip in MFU.
 *
 * The job event can arrive after the job's first steps (rank 0's sender is one of many, and a
 * collector's batches reach the bus in any order): steps whose frames closed before it are held,
 * the latest MFU_WAIT_STEPS of them, and get their points when it comes.
 */

import { DEFAULT_CONVENTION, type FlopConvention, flopsPerToken } from '../../mfu/flops.js';
import { findGpu, peakFlops } from '../../mfu/peaks.js';
import { implausibility, type MfuInputs } from '../../mfu/plausible.js';
import type { JobEvent } from '../../schema/events.js';
import type { MfuPoint } from '../../schema/output.js';
import type { StepFrame } from '../steps.js';

/** Steps held for a job event that has not come yet; past them the oldest go without MFU. */
export const MFU_WAIT_STEPS = 64;

type FrameFigures = Pick<StepFrame, 'step' | 'ts' | 'count' | 'tokens'>;

export class MfuSeries {
  private meta: JobEvent | undefined;
  private flopsPerStep: number | undefined;
  private flopsPerToken: number | undefined;
  private peak: number | undefined;
  private world = 0;
  private shards = 1;
  private tokens = 0;
  private sumFlops = 0;
  private sumSeconds = 0;
  last: MfuPoint | undefined;
  /** First reason a figure of this job was implausible (the runner says it once). */
  implausible: string | undefined;
  /** Steps that closed before the job event, with their wall time, oldest first. */
  private waiting: (FrameFigures & { stepMs: number })[] = [];
  /** Steps went without MFU for want of a job event: it is overdue, not just late. */
  private waitedOut = false;

  constructor(
    private readonly job: string,
    private readonly convention: FlopConvention = DEFAULT_CONVENTION,
  ) {}

  /** Takes the job event; returns the points of steps that were held for it, in step order. */
  configure(meta: JobEvent): MfuPoint[] {
    this.meta = meta;
    this.world = meta.world_size;
    const p = meta.parallel;
    this.shards = Math.max(1, (p?.tp ?? 1) * (p?.pp ?? 1) * (p?.cp ?? 1));
    this.flopsPerStep = meta.flops_per_step;
    this.flopsPerToken = meta.model ? flopsPerToken(meta.model, this.convention) : undefined;
    this.tokens = meta.global_batch_tokens ?? 0;
    this.peak = findGpu(meta.gpu_model) ? safePeak(meta.gpu_model, meta.dtype) : undefined;
    const held = this.waiting;
    this.waiting = [];
    return held.flatMap((f) => this.process(f, f.stepMs) ?? []);
  }

  /** Whether steps are held for the job event, which is not overdue yet (nothing to say so far). */
  waitingForJob(): boolean {
    return this.meta === undefined && !this.waitedOut;
  }

  /** Whether steps are held for a job event that has not come. */
  holding(): boolean {
    return this.waiting.length > 0;
  }

  /** Why this job gets no MFU, or undefined when it can (checked before any step). */
  unavailable(): string | undefined {
    const m = this.meta;
    if (!m)
      return 'no `job` event was seen: MFU needs its world_size, gpu_model, dtype and model (or flops_per_step)';
    if (!findGpu(m.gpu_model))
      return `GPU model "${m.gpu_model}" has no peak in rankwatch's table: set \`gpu_model\` on the job event (the hook's gpu_model=, the megatron_log source's gpuModel) to one of \`rankwatch mfu --list-gpus\``;
    if (this.peak === undefined)
      return `no ${m.dtype} peak is known for ${m.gpu_model}: set the job's \`dtype\` to one the GPU has (\`rankwatch mfu --list-gpus\`)`;
    if (this.flopsPerStep === undefined && this.flopsPerToken === undefined)
      return 'the job event has neither `model` nor `flops_per_step`: MFU needs one of them';
    return undefined;
  }

  /** Returns the step's MFU point, or undefined when the job's FLOPs, GPU or tokens are unknown. */
  process(f: FrameFigures, stepMs: number): MfuPoint | undefined {
    if (!this.meta) {
      this.waiting.push({ step: f.step, ts: f.ts, count: f.count, tokens: f.tokens, stepMs });
      if (this.waiting.length > MFU_WAIT_STEPS) {
        this.waiting.shift();
        this.waitedOut = true;
      }
      return undefined;
    }
    if (!this.peak || !this.world || !(stepMs > 0)) return undefined;
    const fromRanks = f.count > 0 ? (f.tokens / this.shards) * Math.max(1, this.world / f.count) : 0;
    const tokens = this.tokens || fromRanks;
    const flops = this.flopsPerStep ?? (this.flopsPerToken ?? 0) * tokens;
    if (!(flops > 0)) return undefined;
    const perGpu = flops / (stepMs / 1000) / this.world;
    const mfu = perGpu / this.peak;
    const point: MfuPoint = {
      job: this.job,
      step: f.step,
      ts: f.ts,
      step_ms: stepMs,
      tokens,
      tflops_per_gpu: perGpu / 1e12,
      mfu,
    };
    const why = implausibility(this.inputs(mfu, tokens));
    if (why) {
      point.implausible = why;
      this.implausible ??= why;
    } else {
      // Only figures that can be true go into the job's overall MFU.
      this.sumFlops += flops;
      this.sumSeconds += stepMs / 1000;
    }
    this.last = point;
    return point;
  }

  /** MFU over every plausible step seen: total model FLOPs over total wall time. */
  overall(): number | undefined {
    if (!this.peak || !this.world || this.sumSeconds === 0) return undefined;
    return this.sumFlops / this.sumSeconds / this.world / this.peak;
  }

  private inputs(mfu: number, tokens: number): MfuInputs {
    const m = this.meta!;
    const p = m.parallel;
    return {
      mfu,
      source:
        this.flopsPerStep !== undefined
          ? 'flops_per_step'
          : this.tokens
            ? 'global_batch_tokens'
            : 'step_tokens',
      tokensPerStep: tokens,
      gpus: this.world,
      peakTflops: (this.peak ?? 0) / 1e12,
      gpuModel: m.gpu_model,
      dtype: m.dtype,
      dp: p?.dp,
      shards: this.shards,
      layoutRanks: p ? this.shards * (p.dp ?? 1) : undefined,
    };
  }
}

function safePeak(model: string, dtype: string): number | undefined {
  try {
    return peakFlops(model, dtype);
  } catch {
    return undefined;
  }
}
