/**
 * An MFU above 100% cannot be true, and one below 0.1% almost never is: one input is wrong. This
 * names the likeliest one from the way the figure was made, so a person fixes the input instead
 * of trusting (or debugging) the number.
 */

/** Below this, a figure is as suspect as one above 1. */
export const MFU_FLOOR = 0.001;

export interface MfuInputs {
  mfu: number;
  /** Where the step's work came from. */
  source: 'global_batch_tokens' | 'step_tokens' | 'flops_per_step' | 'cli';
  tokensPerStep: number;
  gpus: number;
  peakTflops: number;
  gpuModel?: string;
  dtype?: string;
  /** Layout, when known: dp replicas and the ranks sharing one replica (tp·pp·cp). */
  dp?: number;
  shards?: number;
  /** Ranks of the job, when it differs from `gpus` the check says so. */
  layoutRanks?: number;
}

const fmt = (x: number) => (Math.abs(x) >= 1e5 ? x.toExponential(3) : String(Math.round(x * 100) / 100));

/** Why the figure cannot be true, or undefined when it can. */
export function implausibility(i: MfuInputs): string | undefined {
  if (i.mfu <= 1 && i.mfu >= MFU_FLOOR) return undefined;
  const high = i.mfu > 1;
  const causes: string[] = [];
  if (i.layoutRanks !== undefined && i.layoutRanks !== i.gpus)
    causes.push(
      `world_size ${i.gpus} differs from tp·pp·cp·dp = ${i.layoutRanks}: the GPU count or the layout is wrong`,
    );
  if (high) {
    if (i.source === 'step_tokens' && (i.shards ?? 1) === 1 && i.gpus > 1 && (i.dp ?? i.gpus) === i.gpus)
      causes.push(
        "the job event's `parallel` says tp 1, pp 1, cp 1: with tensor, pipeline or context parallelism every rank of a data-parallel replica reports the replica's tokens, so give the real tp/pp/cp (or `global_batch_tokens`)",
      );
    if (i.source === 'step_tokens' && (i.dp ?? 1) > 1 && i.mfu / (i.dp ?? 1) <= 1)
      causes.push(
        `step \`tokens\` look like the whole global batch: each rank reports its data-parallel replica's share (global batch / dp ${i.dp}), not the job's`,
      );
    if (i.source === 'global_batch_tokens')
      causes.push(
        `global_batch_tokens ${fmt(i.tokensPerStep)} is too large for the job, or world_size ${i.gpus} too small`,
      );
    if (i.source === 'flops_per_step')
      causes.push(
        'flops_per_step is too large: it is the model FLOPs of one optimizer step of the whole job',
      );
    if (i.source === 'cli')
      causes.push('--tokens-per-step is too large (global batch × sequence length), or --gpus too small');
    causes.push(`the peak (${peakOf(i)}) is too low for the GPU: check gpu_model and dtype`);
  } else {
    causes.push(
      i.source === 'flops_per_step'
        ? 'flops_per_step is too small'
        : `tokens per step ${fmt(i.tokensPerStep)} is too small (one micro batch? a step's tokens are micro batch × micro batches × sequence length per replica)`,
    );
    causes.push(`world_size ${i.gpus} too large, or the peak (${peakOf(i)}) too high`);
  }
  const pct = `${(i.mfu * 100).toFixed(i.mfu < 0.01 ? 3 : 1)}%`;
  return `MFU ${pct} cannot be true; likely: ${causes.join('; or ')}`;
}

function peakOf(i: MfuInputs): string {
  const gpu = [i.gpuModel, i.dtype].filter(Boolean).join(' ');
  return `${fmt(i.peakTflops)} TFLOP/s${gpu ? ` for ${gpu}` : ''}`;
}
