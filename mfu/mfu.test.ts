import { describe, expect, it } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import { activeParams, defaultFfnHidden, estimateParams, flopsPerToken } from './flops.js';
import { computeMfu } from './mfu.js';
import { GPU_SPECS, peakFlops } from './peaks.js';
import { implausibility } from './plausible.js';

const within = (actual: number, expected: number, rel: number) =>
  expect(Math.abs(actual - expected) / expected).toBeLessThan(rel);

describe('MFU against published figures', () => {
  it('reproduces PaLM 540B at 46.2% (PaLM paper, appendix B)', () => {
    // N=540e9, L=118, H=48 heads, Q=256 head dim, T=2048; 238.3k tokens/s on 6144 TPU v4 chips.
    const model = {
      params: 540e9,
      layers: 118,
      hidden: 18432,
      heads: 48,
      head_dim: 256,
      seq_len: 2048,
      vocab: 256000,
    };
    const fpt = flopsPerToken(model, 'palm');
    const tokensPerStep = 238.3e3; // one second of tokens
    const r = computeMfu({
      flopsPerToken: fpt,
      tokensPerStep,
      stepMs: 1000,
      gpus: 6144,
      peakFlopsPerGpu: peakFlops('TPU-v4', 'bf16'),
    });
    within(r.mfu, 0.462, 0.01);
  });

  // Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"),
  // tables 3 and 4: configurations, time per iteration and MFU on A100 (312 TFLOP/s bf16).
  // Megatron's formula: 72·B·s·l·h²·(1 + s/6h + V/12lh) model FLOPs per iteration.
  const rows = [
    { name: '22B', heads: 64, hidden: 6144, layers: 48, gpus: 8, batch: 4, iterS: 1.1, mfu: 0.415 },
    {
      name: '175B (GPT-3)',
      heads: 96,
      hidden: 12288,
      layers: 96,
      gpus: 64,
      batch: 64,
      iterS: 13.75,
      mfu: 0.514,
    },
    { name: '530B', heads: 128, hidden: 20480, layers: 105, gpus: 280, batch: 280, iterS: 37.83, mfu: 0.56 },
  ];
  for (const row of rows) {
    it(`reproduces Megatron-LM ${row.name} at ${(row.mfu * 100).toFixed(1)}% with its own formula`, () => {
      const model = { layers: row.layers, hidden: row.hidden, heads: row.heads, seq_len: 2048, vocab: 51200 };
      const fpt = flopsPerToken(model, 'megatron');
      const closedForm =
        72 *
        row.layers *
        row.hidden ** 2 *
        (1 + 2048 / (6 * row.hidden) + 51200 / (12 * row.layers * row.hidden));
      within(fpt, closedForm, 1e-9);
      const r = computeMfu({
        flopsPerToken: fpt,
        tokensPerStep: row.batch * 2048,
        stepMs: row.iterS * 1000,
        gpus: row.gpus,
        peakFlopsPerGpu: peakFlops('A100', 'bf16'),
      });
      within(r.mfu, row.mfu, 0.01);
    });
  }

  it('halves only the attention-score term under megatron-causal', () => {
    const model = { layers: 32, hidden: 4096, heads: 32, seq_len: 8192, vocab: 128256 };
    const full = flopsPerToken(model, 'megatron');
    const causal = flopsPerToken(model, 'megatron-causal');
    // scores term: 6 · L · 2 · s · h, halved
    expect(full - causal).toBeCloseTo(6 * 32 * 8192 * 4096, -3);
  });

  it('counts GQA, SwiGLU and MoE top-k in the megatron convention', () => {
    const dense = { layers: 2, hidden: 1024, heads: 16, seq_len: 1024, vocab: 1000, ffn_hidden: 4096 };
    const gqa = { ...dense, kv_heads: 4 };
    expect(flopsPerToken(gqa, 'megatron')).toBeLessThan(flopsPerToken(dense, 'megatron'));
    const swiglu = { ...dense, swiglu: true };
    expect(flopsPerToken(swiglu, 'megatron') - flopsPerToken(dense, 'megatron')).toBeCloseTo(
      6 * 2 * 1024 * 4096,
      -2,
    );
    const moe = { ...dense, experts: 8, top_k: 2 };
    expect(flopsPerToken(moe, 'megatron') - flopsPerToken(dense, 'megatron')).toBeCloseTo(
      6 * 2 * 2 * 1024 * 4096,
      -2,
    );
  });

  it('estimates parameters of a Llama-2-7B-shaped model to within 2%', () => {
    const llama7b = {
      layers: 32,
      hidden: 4096,
      heads: 32,
      ffn_hidden: 11008,
      swiglu: true,
      seq_len: 4096,
      vocab: 32000,
    };
    within(estimateParams(llama7b), 6.74e9, 0.02);
  });
});

describe('peak table', () => {
  it('gives dense figures with a source for every GPU', () => {
    for (const spec of GPU_SPECS) {
      expect(spec.source.length).toBeGreaterThan(10);
      expect(Object.keys(spec.peak).length).toBeGreaterThan(0);
    }
    expect(peakFlops('H100-SXM', 'bf16')).toBe(989.4e12);
    expect(peakFlops('NVIDIA H100 80GB HBM3', 'fp8')).toBe(1978.9e12);
    expect(peakFlops('MI300X', 'bf16')).toBe(1307.4e12);
    expect(peakFlops('l40s', 'bf16')).toBe(362.05e12);
  });

  it('rejects unknown GPUs and dtypes with a catalogued error', () => {
    expect(() => peakFlops('RTX-9999')).toThrowError(/RTX-9999/);
    expect(() => peakFlops('A100', 'fp8')).toThrowError(/no fp8 peak known for A100/);
    for (const [model, dtype] of [
      ['RTX-9999', 'bf16'],
      ['A100', 'fp8'],
    ] as const) {
      let err: unknown;
      try {
        peakFlops(model, dtype);
      } catch (e) {
        err = e;
      }
      expect(err, `${model}/${dtype} must throw`).toBeInstanceOf(RankwatchError);
      expect(err).toMatchObject({ code: 'RANKWATCH_ERR_UNKNOWN_GPU', retriable: false });
      expect((err as RankwatchError).describe()).toMatch(/^RANKWATCH_ERR_UNKNOWN_GPU: /);
    }
  });
});

describe('MoE and Megatron defaults', () => {
  // Megatron-LM megatron/training/training.py, num_floating_point_operations (transformer_flops),
  // written out for BSHD batches: per token, 3 (fwd+bwd) x 2 (FMA) x [h·(ffn·m·dense + f_e·k·m·moe +
  // f_s·m·moe) + attention projections + h·V] + the causal core-attention term s·(3·2·h_q/2·2)·L.
  function megatronReference(c: {
    L: number;
    dense: number;
    h: number;
    heads: number;
    groups: number;
    ffn: number;
    moeFfn: number;
    k: number;
    shared: number;
    V: number;
    s: number;
    swiglu: boolean;
  }): number {
    const m = c.swiglu ? 3 : 2;
    const kvc = c.h / c.heads;
    const q = kvc * c.heads;
    const kv = kvc * c.groups;
    const moe = c.L - c.dense;
    const mlp = 3 * 2 * c.h * (c.ffn * m * c.dense + c.moeFfn * c.k * m * moe + c.shared * m * moe);
    const attn = 3 * 2 * (c.h * (q + kv + kv) + q * c.h) * c.L;
    const logits = 3 * 2 * c.h * c.V;
    const core = c.s * ((3 * 2 * q) / 2) * 2 * c.L;
    return mlp + attn + logits + core;
  }

  it('equals Megatron-LM’s own count for a DeepSeek-style MoE (dense first layer, shared experts)', () => {
    const c = {
      L: 27,
      dense: 1,
      h: 2048,
      heads: 16,
      groups: 16,
      ffn: 10944,
      moeFfn: 1408,
      k: 6,
      shared: 2816,
      V: 102400,
      s: 4096,
      swiglu: true,
    };
    const model = {
      layers: c.L,
      hidden: c.h,
      heads: c.heads,
      ffn_hidden: c.ffn,
      swiglu: true,
      seq_len: c.s,
      vocab: c.V,
      experts: 64,
      top_k: c.k,
      moe_ffn_hidden: c.moeFfn,
      shared_expert_ffn_hidden: c.shared,
      moe_layers: c.L - c.dense,
    };
    within(flopsPerToken(model, 'megatron-causal'), megatronReference(c), 1e-12);
    // Never all experts: routing to all 64 would be ~8x the MLP work.
    expect(flopsPerToken({ ...model, top_k: 64 }, 'megatron-causal')).toBeGreaterThan(
      5 * flopsPerToken(model, 'megatron-causal'),
    );
  });

  it('palm counts the activated parameters: top-k and shared experts, not all of them', () => {
    const moe = {
      layers: 4,
      hidden: 1024,
      heads: 8,
      ffn_hidden: 2048,
      swiglu: true,
      seq_len: 1024,
      vocab: 1000,
      experts: 16,
      top_k: 2,
      shared_expert_ffn_hidden: 2048,
    };
    const expert = 3 * 1024 * 2048;
    expect(estimateParams(moe) - activeParams(moe)).toBe(4 * 14 * expert);
    expect(flopsPerToken(moe, 'palm')).toBe(6 * activeParams(moe) + 12 * 4 * 1024 * 1024);
    // Dense: active = all.
    const { experts: _e, top_k: _k, shared_expert_ffn_hidden: _s, ...dense } = moe;
    expect(activeParams(dense)).toBe(estimateParams(dense));
  });

  it('swiglu without ffn_hidden takes Megatron’s default, int(8h/3/64)·64, never 4h', () => {
    expect(defaultFfnHidden(4096, true)).toBe(10880);
    expect(defaultFfnHidden(4096, false)).toBe(16384);
    const m = { layers: 2, hidden: 4096, heads: 32, seq_len: 2048, vocab: 32000, swiglu: true };
    expect(flopsPerToken(m, 'megatron')).toBe(flopsPerToken({ ...m, ffn_hidden: 10880 }, 'megatron'));
    expect(flopsPerToken(m, 'megatron')).not.toBe(flopsPerToken({ ...m, ffn_hidden: 16384 }, 'megatron'));
  });
});

describe('implausible MFU says which input is likely wrong', () => {
  const base = { tokensPerStep: 1e6, gpus: 64, peakTflops: 989.4, gpuModel: 'H100-SXM', dtype: 'bf16' };
  it('lets a true figure be', () => {
    expect(implausibility({ ...base, mfu: 0.42, source: 'step_tokens', dp: 8, shards: 8 })).toBeUndefined();
  });
  it('names the missing layout when ranks report replica tokens and the job says tp 1', () => {
    const why = implausibility({
      ...base,
      mfu: 1.76,
      source: 'step_tokens',
      dp: 64,
      shards: 1,
      layoutRanks: 64,
    });
    expect(why).toMatch(
      /^MFU 176\.0% cannot be true; likely: the job event's `parallel` says tp 1, pp 1, cp 1/,
    );
  });
  it('names per-job tokens on every rank when dividing by dp makes it true', () => {
    const why = implausibility({
      ...base,
      mfu: 3.2,
      source: 'step_tokens',
      dp: 8,
      shards: 8,
      layoutRanks: 64,
    });
    expect(why).toMatch(/look like the whole global batch/);
  });
  it('names a layout that does not multiply up to the GPU count', () => {
    const why = implausibility({
      ...base,
      mfu: 2,
      source: 'global_batch_tokens',
      dp: 8,
      shards: 4,
      layoutRanks: 32,
    });
    expect(why).toMatch(/world_size 64 differs from tp·pp·cp·dp = 32/);
    expect(why).toMatch(/global_batch_tokens/);
  });
  it('says too small below 0.1%', () => {
    const why = implausibility({ ...base, mfu: 0.0004, source: 'step_tokens' });
    expect(why).toMatch(/^MFU 0\.040% cannot be true; likely: tokens per step .* too small/);
  });
});
