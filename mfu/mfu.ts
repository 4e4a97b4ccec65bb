/** MFU = model FLOPs per second / (GPUs x peak dense FLOP/s of the GPU at the dtype). */

export interface MfuInput {
  flopsPerToken: number;
  tokensPerStep: number;
  stepMs: number;
  gpus: number;
  peakFlopsPerGpu: number;
}

export interface MfuResult {
  mfu: number;
  flops_per_token: number;
  flops_per_step: number;
  tokens_per_s: number;
  tflops_per_gpu: number;
}

export function computeMfu(i: MfuInput): MfuResult {
  const flopsPerStep = i.flopsPerToken * i.tokensPerStep;
  const perGpu = flopsPerStep / (i.stepMs / 1000) / i.gpus;
  return {
    mfu: perGpu / i.peakFlopsPerGpu,
    flops_per_token: i.flopsPerToken,
    flops_per_step: flopsPerStep,
    tokens_per_s: i.tokensPerStep / (i.stepMs / 1000),
    tflops_per_gpu: perGpu / 1e12,
  };
}
