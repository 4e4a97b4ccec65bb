/**
 * The job's description (a v1 `job` event) from what a Megatron-LM log printed before training
 * (its arguments block, the "using world size" line, the padded vocabulary), with the collector
 * config's fields on top. It is what gives a job tailed only from its log an MFU. Pure: the
 * source decides when to emit it and says once what is missing.
 */
import { estimateParams } from '../../mfu/flops.js';
import type { JobEvent, ModelConfig, ParallelLayout } from '../../schema/events.js';
import type { MegatronRun } from './megatron.js';

/** What the collector config may say about the job; it wins over the log. */
export interface MegatronJobConfig {
  job: string;
  model?: Partial<ModelConfig>;
  gpus?: number;
  gpuModel?: string;
  dtype?: string;
  parallel?: Partial<ParallelLayout>;
}

export interface MegatronJob {
  /** Undefined while something MFU needs is unknown (see `missing`). */
  event?: JobEvent;
  model?: ModelConfig;
  /** What is missing, each naming the config field that would give it. */
  missing: string[];
}

const num = (v: string | undefined): number | undefined => {
  if (v === undefined || v === 'None') return undefined;
  const n = Number(v);
  return Number.isFinite(n) ? n : undefined;
};
const bool = (v: string | undefined) => v === 'True';

/** Megatron's --moe-layer-freq: an int k (every k-th layer) or a list such as "[0]*3+[1]*58". */
export function moeLayerCount(freq: string | undefined, layers: number): number | undefined {
  if (freq === undefined || freq === 'None') return undefined;
  const k = num(freq);
  if (k !== undefined) return k > 0 ? Math.ceil(layers / k) : undefined;
  let count = 0;
  for (const term of freq.replace(/\s+/g, '').split('+')) {
    const m = /^\[([\d,]*)\](?:\*(\d+))?$/.exec(term);
    if (!m) return undefined;
    const ones = m[1].split(',').filter((x) => x === '1').length;
    count += ones * Number(m[2] ?? 1);
  }
  return count;
}

/** The model as Megatron's arguments describe it; fields it did not print stay out. */
export function modelFromArgs(run: MegatronRun): Partial<ModelConfig> {
  const a = run.args;
  const m: Partial<ModelConfig> = {};
  const set = <K extends keyof ModelConfig>(k: K, v: ModelConfig[K] | undefined) => {
    if (v !== undefined) m[k] = v;
  };
  set('layers', num(a.num_layers));
  set('hidden', num(a.hidden_size));
  set('heads', num(a.num_attention_heads));
  if (bool(a.group_query_attention)) set('kv_heads', num(a.num_query_groups));
  const hidden = num(a.hidden_size);
  const heads = num(a.num_attention_heads);
  const kv = num(a.kv_channels);
  if (kv !== undefined && hidden && heads && kv !== hidden / heads) set('head_dim', kv);
  set('ffn_hidden', num(a.ffn_hidden_size));
  if (a.swiglu !== undefined) set('swiglu', bool(a.swiglu));
  set('seq_len', num(a.seq_length));
  set('vocab', run.paddedVocab ?? num(a.padded_vocab_size) ?? num(a.vocab_size));
  const experts = num(a.num_experts);
  if (experts !== undefined && experts > 1) {
    set('experts', experts);
    set('top_k', num(a.moe_router_topk));
    set('moe_ffn_hidden', num(a.moe_ffn_hidden_size));
    set('shared_expert_ffn_hidden', num(a.moe_shared_expert_intermediate_size));
    const layers = num(a.num_layers);
    if (layers) set('moe_layers', moeLayerCount(a.moe_layer_freq, layers));
  }
  return m;
}

function dtypeFromArgs(run: MegatronRun): string | undefined {
  const a = run.args;
  if (a.fp8 !== undefined && a.fp8 !== 'None') return 'fp8';
  if (bool(a.bf16)) return 'bf16';
  if (bool(a.fp16)) return 'fp16';
  return run.paramsDtype;
}

const REQUIRED: (keyof ModelConfig)[] = ['layers', 'hidden', 'heads', 'seq_len', 'vocab'];

/** The job event for `gbs` (samples per step), or what is missing to make one. */
export function megatronJob(run: MegatronRun, cfg: MegatronJobConfig, ts: number, gbs?: number): MegatronJob {
  const a = run.args;
  const model = { ...modelFromArgs(run), ...(cfg.model ?? {}) } as ModelConfig;
  const missing: string[] = [];
  const lacking = REQUIRED.filter((k) => model[k] === undefined);
  if (lacking.length)
    missing.push(
      `the model's ${lacking.join(', ')} (the log has no arguments block with them: set \`model\`)`,
    );
  const L = run.layout;
  const parallel: ParallelLayout = {
    tp: cfg.parallel?.tp ?? num(a.tensor_model_parallel_size) ?? L.tp ?? 1,
    pp: cfg.parallel?.pp ?? num(a.pipeline_model_parallel_size) ?? L.pp ?? 1,
    dp: cfg.parallel?.dp ?? num(a.data_parallel_size) ?? L.dp ?? 1,
    cp: cfg.parallel?.cp ?? num(a.context_parallel_size) ?? L.cp ?? 1,
  };
  const ep = cfg.parallel?.ep ?? num(a.expert_model_parallel_size);
  if (ep !== undefined) parallel.ep = ep;
  const world = cfg.gpus ?? num(a.world_size) ?? L.world;
  if (world === undefined) missing.push('the GPU count (no "using world size" line: set `gpus`)');
  // Not a reason to withhold the job: with "unknown" the detectors still run and the runner's
  // mfu_unavailable finding names the field to set.
  if (!cfg.gpuModel)
    missing.push('the GPU model (a Megatron log never says it: set `gpuModel`, e.g. H100-SXM)');
  const dtype = cfg.dtype ?? dtypeFromArgs(run);
  if (!dtype) missing.push('the training dtype (no bf16/fp16 argument: set `dtype`)');
  const batch = gbs ?? num(a.global_batch_size);
  if (lacking.length || world === undefined || !dtype)
    return { missing, model: lacking.length ? undefined : model };
  const event: JobEvent = {
    v: 1,
    kind: 'job',
    ts,
    job: cfg.job,
    world_size: world,
    gpu_model: cfg.gpuModel ?? 'unknown',
    dtype,
    parallel,
    model,
  };
  if (batch !== undefined) event.global_batch_tokens = batch * model.seq_len;
  return { event, model, missing };
}

/**
 * The parameter count Megatron printed, against the model config's: a disagreement over
 * `tolerance` means the config given to rankwatch is not the model that runs, so every MFU
 * figure built on it is off. Undefined when they agree or the log did not say.
 */
export function paramMismatch(run: MegatronRun, model: ModelConfig, tolerance = 0.02): string | undefined {
  const printed = printedParams(run);
  if (printed === undefined) return undefined;
  const ours = model.params ?? estimateParams(model) + embeddingAdjustment(run, model);
  const off = Math.abs(ours - printed.value) / printed.value;
  if (off <= tolerance) return undefined;
  return `Megatron counts ${(printed.value / 1e9).toFixed(3)}B parameters (${printed.from}), the model config gives ${(ours / 1e9).toFixed(3)}B (${(off * 100).toFixed(1)}% apart): check layers, hidden, ffn_hidden, vocab and the MoE fields given to rankwatch`;
}

/** estimateParams counts untied embeddings and no position table; Megatron's printed count may differ. */
function embeddingAdjustment(run: MegatronRun, model: ModelConfig): number {
  const a = run.args;
  const pp = num(a.pipeline_model_parallel_size) ?? run.layout.pp ?? 1;
  let adj = 0;
  // Tied embeddings are counted once, except that with pipelining the last stage holds a copy.
  if (a.untie_embeddings_and_output_weights === 'False' && pp === 1) adj -= model.vocab * model.hidden;
  if (
    bool(a.add_position_embedding) &&
    (a.position_embedding_type ?? 'learned_absolute') === 'learned_absolute'
  )
    adj += (num(a.max_position_embeddings) ?? model.seq_len) * model.hidden;
  return adj;
}

function printedParams(run: MegatronRun): { value: number; from: string } | undefined {
  if (run.totalParamsB !== undefined)
    return { value: run.totalParamsB * 1e9, from: '"Total number of parameters in billions"' };
  // Per-rank counts add up to the model only when every tensor/pipeline rank printed its own,
  // and expert parallelism does not split the experts further.
  const a = run.args;
  const tp = num(a.tensor_model_parallel_size) ?? run.layout.tp;
  const pp = num(a.pipeline_model_parallel_size) ?? run.layout.pp;
  const ep = num(a.expert_model_parallel_size) ?? 1;
  if (tp === undefined || pp === undefined || ep > 1 || run.rankParams.size !== tp * pp) return undefined;
  let sum = 0;
  for (const n of run.rankParams.values()) sum += n;
  return { value: sum, from: `the sum over its ${tp * pp} tensor/pipeline ranks` };
}
