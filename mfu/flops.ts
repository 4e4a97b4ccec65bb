/**
 * Model FLOPs per trained token, under the three conventions people publish MFU with.
 * All count a training step as 3x the forward pass (forward + backward, no recomputation):
 * MFU is about the model's FLOPs, not the hardware's.
 *
 * - palm:            6N + 12·L·H·Q·T (PaLM, appendix B). N = the parameters a token passes
 *                    through: for MoE the top-k routed experts plus the shared ones, never all
 *                    experts. Attention counted over the full sequence (no causal mask).
 * - megatron:        Megatron-LM's per-matmul count (num_floating_point_operations in
 *                    megatron/training/training.py): QKV with GQA, attention scores over the full
 *                    sequence, output projection, MLP (gated = 1.5x), MoE layers as top-k routed
 *                    experts plus shared experts (moe_shared_expert_intermediate_size), dense layers
 *                    of an MoE model at ffn_hidden, and the logits.
 * - megatron-causal: the same with the attention-score term halved for the causal mask, as
 *                    Megatron-LM counts it since 2025.
 *
 * Defaults follow Megatron's own (megatron/training/arguments.py): without `ffn_hidden`, a gated
 * (swiglu) MLP has int(4h·2/3 / 64)·64, a plain one 4h; `moe_ffn_hidden` defaults to `ffn_hidden`.
 */
import type { ModelConfig } from '../schema/events.js';

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
  /** Inner size of the dense MLP. */
  ffn: number;
  /** Matrices per MLP: 3 gated (swiglu), 2 plain. */
  mats: number;
  moe: boolean;
  experts: number;
  topK: number;
  expertFfn: number;
  sharedFfn: number;
  moeLayers: number;
}

/** Megatron's default MLP size (arguments.py): gated MLPs keep the parameters of a 4h one. */
export function defaultFfnHidden(hidden: number, swiglu: boolean): number {
  return swiglu ? Math.floor((4 * hidden * 2) / 3 / 64) * 64 : 4 * hidden;
}

function dims(m: ModelConfig): Dims {
  const headDim = m.head_dim ?? m.hidden / m.heads;
  const experts = m.experts ?? 1;
  const moe = experts > 1;
  const gated = m.swiglu ?? false;
  const ffn = m.ffn_hidden ?? defaultFfnHidden(m.hidden, gated);
  return {
    L: m.layers,
    h: m.hidden,
    hq: m.heads * headDim,
    hkv: (m.kv_heads ?? m.heads) * headDim,
    s: m.seq_len,
    V: m.vocab,
    ffn,
    mats: gated ? 3 : 2,
    moe,
    experts,
    topK: moe ? Math.min(m.top_k ?? 1, experts) : 1,
    expertFfn: moe ? (m.moe_ffn_hidden ?? ffn) : ffn,
    sharedFfn: moe ? (m.shared_expert_ffn_hidden ?? 0) : 0,
    moeLayers: moe ? Math.min(m.moe_layers ?? m.layers, m.layers) : 0,
  };
}

function attentionParams(d: Dims): number {
  return d.h * (d.hq + 2 * d.hkv) + d.hq * d.h;
}

/** MLP parameters of all layers with `routed` experts per MoE layer (all of them, or the top-k). */
function mlpParams(d: Dims, routed: number): number {
  const dense = (d.L - d.moeLayers) * d.mats * d.h * d.ffn;
  const moe = d.moeLayers * d.mats * d.h * (d.expertFfn * routed + d.sharedFfn);
  return dense + moe;
}

/** Parameters implied by the config, all experts (used when `params` is not given). Embeddings untied. */
export function estimateParams(m: ModelConfig): number {
  const d = dims(m);
  return d.L * attentionParams(d) + mlpParams(d, d.experts) + 2 * d.V * d.h;
}

/**
 * Parameters one token passes through: for MoE, `params` (or the estimate) less the experts a
 * token is not routed to. Equals the total for a dense model.
 */
export function activeParams(m: ModelConfig): number {
  const d = dims(m);
  const total = m.params ?? estimateParams(m);
  if (!d.moe) return total;
  const idle = d.moeLayers * d.mats * d.h * d.expertFfn * (d.experts - d.topK);
  return total - idle;
}

/** Model FLOPs per token for one training step (forward + backward). */
export function flopsPerToken(m: ModelConfig, convention: FlopConvention = DEFAULT_CONVENTION): number {
  const d = dims(m);
  if (convention === 'palm') {
    // 12·L·H·Q·T: H·Q = heads·head_dim = hq
    return 6 * activeParams(m) + 12 * d.L * d.hq * d.s;
  }
  const causal = convention === 'megatron-causal' ? 0.5 : 1;
  // Multiply-accumulates per token of one forward pass; x2 FLOPs per MAC, x3 for fwd+bwd.
  const attn = attentionParams(d) + 2 * d.s * d.hq * causal; // projections + QK^T and attention x V
  const mlp = mlpParams(d, d.topK);
  const logits = d.h * d.V;
  return 6 * (d.L * attn + mlp + logits);
}
