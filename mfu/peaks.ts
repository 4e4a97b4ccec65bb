/**
 * Peak dense (no structured sparsity) tensor throughput per GPU, TFLOP/s, by dtype, and the
 * maximum SM clock the throttle detector compares against. Vendors print sparse figures
 * first; every value here is the dense one, with the datasheet it comes from.
 */
import { RankwatchError } from '../core/errors.js';

export interface GpuSpec {
  name: string;
  aliases: string[];
  /** Dense TFLOP/s by dtype. */
  peak: Partial<Record<'fp64' | 'fp32' | 'tf32' | 'bf16' | 'fp16' | 'fp8' | 'int8' | 'fp4', number>>;
  maxSmClockMhz?: number;
  source: string;
}

export const GPU_SPECS: GpuSpec[] = [
  {
    name: 'A100-SXM',
    aliases: ['A100', 'A100-SXM4-80GB', 'A100-SXM4-40GB', 'NVIDIA A100-SXM4-80GB', 'NVIDIA A100-SXM4-40GB'],
    peak: { fp64: 19.5, fp32: 19.5, tf32: 156, bf16: 312, fp16: 312, int8: 624 },
    maxSmClockMhz: 1410,
    source: 'NVIDIA A100 Tensor Core GPU datasheet (2021), dense column',
  },
  {
    // The export variant of the A100 (NVLink cut to 400 GB/s); same SMs, clocks and tensor peaks.
    name: 'A800-SXM',
    aliases: ['A800', 'NVIDIA A800-SXM4-80GB', 'NVIDIA A800 80GB PCIe', 'A800-SXM4-80GB'],
    peak: { fp64: 19.5, fp32: 19.5, tf32: 156, bf16: 312, fp16: 312, int8: 624 },
    maxSmClockMhz: 1410,
    source: 'NVIDIA A800 Tensor Core GPU datasheet (2022), dense column',
  },
  {
    name: 'A100-PCIE',
    aliases: ['A100-PCIe', 'NVIDIA A100-PCIE-40GB', 'NVIDIA A100 80GB PCIe'],
    peak: { fp64: 19.5, fp32: 19.5, tf32: 156, bf16: 312, fp16: 312, int8: 624 },
    maxSmClockMhz: 1410,
    source: 'NVIDIA A100 Tensor Core GPU datasheet (2021), dense column',
  },
  {
    name: 'H100-SXM',
    aliases: ['H100', 'H100-SXM5', 'NVIDIA H100 80GB HBM3', 'H100 SXM'],
    peak: { fp64: 66.9, fp32: 66.9, tf32: 494.7, bf16: 989.4, fp16: 989.4, fp8: 1978.9, int8: 1978.9 },
    maxSmClockMhz: 1980,
    source: 'NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column, sparsity figures halved',
  },
  {
    name: 'H100-PCIE',
    aliases: ['H100-PCIe', 'NVIDIA H100 PCIe', 'H100 PCIe'],
    peak: { fp64: 51.2, fp32: 51.2, tf32: 378, bf16: 756, fp16: 756, fp8: 1513, int8: 1513 },
    maxSmClockMhz: 1755,
    source: 'NVIDIA H100 Tensor Core GPU datasheet (2023), PCIe column, sparsity figures halved',
  },
  {
    name: 'H100-NVL',
    aliases: ['NVIDIA H100 NVL', 'H100 NVL'],
    peak: { fp64: 60, fp32: 60, tf32: 417.5, bf16: 835.5, fp16: 835.5, fp8: 1670.5, int8: 1670.5 },
    maxSmClockMhz: 1785,
    source: 'NVIDIA H100 Tensor Core GPU datasheet (2023), H100 NVL column, sparsity figures halved',
  },
  {
    name: 'H200-SXM',
    aliases: ['H200', 'NVIDIA H200', 'H200 SXM', 'NVIDIA H200 141GB HBM3e'],
    peak: { fp64: 66.9, fp32: 66.9, tf32: 494.7, bf16: 989.4, fp16: 989.4, fp8: 1978.9, int8: 1978.9 },
    maxSmClockMhz: 1980,
    source: 'NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column, sparsity figures halved',
  },
  {
    name: 'B200',
    aliases: ['NVIDIA B200', 'B200-SXM', 'HGX B200'],
    peak: { fp64: 40, fp32: 80, tf32: 1100, bf16: 2250, fp16: 2250, fp8: 4500, int8: 4500, fp4: 9000 },
    maxSmClockMhz: 1965,
    source: 'NVIDIA HGX B200 specifications (2024), per GPU, sparsity figures halved',
  },
  {
    name: 'GB200',
    aliases: ['NVIDIA GB200', 'GB200 NVL72'],
    peak: { fp64: 45, fp32: 90, tf32: 1250, bf16: 2500, fp16: 2500, fp8: 5000, int8: 5000, fp4: 10000 },
    source: 'NVIDIA GB200 NVL72 specifications (2024), per GPU (1/72 of the rack), sparsity figures halved',
  },
  {
    name: 'MI300X',
    aliases: ['AMD Instinct MI300X', 'MI300X-OAM'],
    peak: { fp64: 81.7, fp32: 163.4, tf32: 653.7, bf16: 1307.4, fp16: 1307.4, fp8: 2614.9, int8: 2614.9 },
    maxSmClockMhz: 2100,
    source: 'AMD Instinct MI300X data sheet (2023), dense (without sparsity)',
  },
  {
    name: 'MI325X',
    aliases: ['AMD Instinct MI325X'],
    peak: { fp64: 81.7, fp32: 163.4, tf32: 653.7, bf16: 1307.4, fp16: 1307.4, fp8: 2614.9, int8: 2614.9 },
    maxSmClockMhz: 2100,
    source: 'AMD Instinct MI325X data sheet (2024), dense (without sparsity)',
  },
  {
    name: 'L40S',
    aliases: ['NVIDIA L40S'],
    peak: { fp32: 91.6, tf32: 183, bf16: 362.05, fp16: 362.05, fp8: 733, int8: 733 },
    maxSmClockMhz: 2520,
    source: 'NVIDIA L40S datasheet (2023), sparsity figures halved',
  },
  {
    name: 'V100-SXM2',
    aliases: ['V100', 'Tesla V100-SXM2-32GB', 'Tesla V100-SXM2-16GB'],
    peak: { fp64: 7.8, fp32: 15.7, fp16: 125 },
    maxSmClockMhz: 1530,
    source: 'NVIDIA Tesla V100 datasheet (2020), SXM2 column',
  },
  {
    name: 'TPU-v4',
    aliases: ['TPUv4', 'TPU v4'],
    peak: { bf16: 275, int8: 275 },
    source: 'Google Cloud TPU v4 documentation (275 TFLOP/s bf16 per chip), the figure the PaLM paper uses',
  },
];

const byName = new Map<string, GpuSpec>();
for (const spec of GPU_SPECS) {
  for (const n of [spec.name, ...spec.aliases]) byName.set(normalise(n), spec);
}

function normalise(name: string): string {
  return name.toLowerCase().replace(/[\s_]+/g, '-');
}

/**
 * Names already looked up, as given: the throttle detector asks for its job's GPU on every sample
 * without a clock ceiling, and normalising the name each time was ~3% of a replay. Bounded, since
 * names come from input.
 */
const looked = new Map<string, GpuSpec | undefined>();

export function findGpu(model: string): GpuSpec | undefined {
  // One lookup on the hot path (the throttle detector asks per GPU sample); `has` only for a miss.
  const hit = looked.get(model);
  if (hit !== undefined || looked.has(model)) return hit;
  const spec = byName.get(normalise(model));
  if (looked.size < 1000) looked.set(model, spec);
  return spec;
}

/** Peak dense FLOP/s (not TFLOP/s) of one GPU at the dtype. Throws a catalogued error when unknown. */
export function peakFlops(model: string, dtype = 'bf16'): number {
  const spec = findGpu(model);
  if (!spec) {
    throw new RankwatchError('RANKWATCH_ERR_UNKNOWN_GPU', `no peak FLOP/s known for GPU model "${model}"`);
  }
  const tflops = spec.peak[dtype.toLowerCase() as keyof GpuSpec['peak']];
  if (tflops === undefined) {
    throw new RankwatchError(
      'RANKWATCH_ERR_UNKNOWN_GPU',
      `no ${dtype} peak known for ${spec.name} (known: ${Object.keys(spec.peak).join(', ')})`,
    );
  }
  return tflops * 1e12;
}
