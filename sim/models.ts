/** Model shapes the simulator can train; the FLOPs of each come from mfu/flops.ts. */
import type { ModelConfig } from '../schema/events.js';

export const MODELS: Record<string, ModelConfig> = {
  'llama-8b': {
    params: 8.03e9,
    layers: 32,
    hidden: 4096,
    heads: 32,
    kv_heads: 8,
    ffn_hidden: 14336,
    swiglu: true,
    seq_len: 8192,
    vocab: 128256,
  },
  'llama-70b': {
    params: 70.6e9,
    layers: 80,
    hidden: 8192,
    heads: 64,
    kv_heads: 8,
    ffn_hidden: 28672,
    swiglu: true,
    seq_len: 8192,
    vocab: 128256,
  },
  'gpt3-175b': { params: 175e9, layers: 96, hidden: 12288, heads: 96, seq_len: 2048, vocab: 51200 },
};
