/**
 * Model FLOPs per trained token, under the three conventions people publish MFU with.
 * All count a training step as 3x the forward pass (forward + backward, no recomputation):
 * MFU is about the model's FLOPs, not the hardware's.
 *
 * - palm:            6N + 12·L·H·Q·T (PaLM, appendix B). N = all parameters; attention
 *                    counted over the full sequence (no causal mask).
 * - megatron:        Megatron-LM's per-matmul count (num_floating_point_operations in
 *                    megatron/training/training.py): QKV with GQA, attention scores over the full
 *                    sequence, output projection, MLP (gated = 1.5x), MoE top-k, and the logits.
 * - megatron-causal: the same with the attention-score term halved for the causal mask, as
 *                    Megatron-LM counts it since 2025.
 */
import { RankwatchError } from '../../core/errors.js';
import type { ModelConfig } from '../../schema/events.js';

export const FLOP_CONVENTIONS = ['palm', 'megatron', 'megatron-causal'] as const;
export type FlopConvention = (typeof FLOP_CONVENTIONS)[number];

/** PaLM's convention is the default: it is how MFU was defined and how most papers report it. */
export const DEFAULT_CONVENTION: FlopConvention = 'palm';

interface Dims {
  L: number;
  h: number;
  hq: number;
  hkv: number;
  s: number;
  V: number;
  ffn: number;
  gated: boolean;
  topK: number;
  expertFfn: number;
  moe: boolean;
}

function dims(m: ModelConfig): Dims {
  const headDim = m.head_dim ?? m.hidden / m.heads;
  const moe = (m.experts ?? 1) > 1;
  const ffn = m.ffn_hidden ?? 4 * m.hidden;
  return {
    L: m.layers,
    h: m.hidden,
    hq: m.heads * headDim,
    hkv: (m.kv_heads ?? m.heads) * headDim,
    s: m.seq_len,
    V: m.vocab,
    ffn,
    gated: m.swiglu ?? false,
    topK: moe ? (m.top_k ?? 1) : 1,
    expertFfn: moe ? (m.moe_ffn_hidden ?? ffn) : ffn,
    moe,
  };
}

/** Parameters implied by the config (used when `params` is not given). Embeddings untied. */
export function estimateParams(m: ModelConfig): number {
  const d = dims(m);
  const attn = d.h * (d.hq + 2 * d.hkv) + d.hq * d.h;
  const mlpOne = (d.gated ? 3 : 2) * d.h * d.expertFfn;
  const mlp = d.moe ? mlpOne * (m.experts ?? 1) : mlpOne;
  return d.L * (attn + mlp) + 2 * d.V * d.h;
}

/** Model FLOPs per token for one training step (forward + backward). */
export function flopsPerToken(m: ModelConfig, convention: FlopConvention = DEFAULT_CONVENTION): number {
  const d = dims(m);
  if (convention === 'palm') {
    const n = m.params ?? estimateParams(m);
    // 12·L·H·Q·T: H·Q = heads·head_dim = hq
    return 6 * n + 12 * d.L * d.hq * d.s;
  }
  const causal = convention === 'megatron-causal' ? 0.5 : 1;
  // Multiply-accumulates per token of one forward pass; x2 FLOPs per MAC, x3 for fwd+bwd.
  const qkv = d.h * (d.hq + 2 * d.hkv);
  const scores = 2 * d.s * d.hq * causal; // QK^T and attention x V
  const proj = d.hq * d.h;
  const mlp = (d.gated ? 3 : 2) * d.h * d.expertFfn * d.topK;
  const logits = d.h * d.V;
  return 6 * (d.L * (qkv + scores + proj + mlp) + logits);
}

export function parseConvention(value: string): FlopConvention {
  if ((FLOP_CONVENTIONS as readonly string[]).includes(value)) return value as FlopConvention;
  throw new RankwatchError(
    'RANKWATCH_ERR_USAGE',
    `unknown FLOP convention "${value}" (expected ${FLOP_CONVENTIONS.join(', ')})`,
  );
}
