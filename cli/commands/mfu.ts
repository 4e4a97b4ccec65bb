import { readFileSync } from 'node:fs';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { RankwatchError } from '../../core/errors.js';
import { DEFAULT_CONVENTION, defaultFfnHidden, FLOP_CONVENTIONS, flopsPerToken } from '../../mfu/flops.js';
import { computeMfu } from '../../mfu/mfu.js';
import { GPU_SPECS, peakFlops } from '../../mfu/peaks.js';
import { implausibility } from '../../mfu/plausible.js';
import { ModelConfig } from '../../schema/events.js';
import { type Command, defineOptions, optionsHelp, parseOptions, required } from '../args.js';
import { table } from '../table.js';

const checkModel = TypeCompiler.Compile(ModelConfig);

/** A figure that must be above zero: 0 would make MFU Infinity. */
const positive = { kind: 'number', exclusiveMin: true } as const;

const OPTIONS = defineOptions({
  model: {
    kind: 'file',
    arg: 'FILE.json',
    help: "the job event's model fields: params, layers, hidden, heads, kv_heads, ffn_hidden, seq_len, vocab, experts, top_k, plus head_dim, swiglu, moe_ffn_hidden, shared_expert_ffn_hidden, moe_layers where needed (MoE counts the top_k and shared experts, never all of them)",
  },
  'tokens-per-step': {
    ...positive,
    arg: 'T',
    help: 'tokens in one optimizer step, whole job (global batch x sequence length; from per-rank step tokens: their sum / (tp x pp x cp))',
  },
  'step-ms': { ...positive, arg: 'X', help: 'wall time of one step, milliseconds' },
  gpus: { kind: 'number', integer: true, min: 1, help: 'GPUs the job runs on' },
  'gpu-model': { kind: 'string', arg: 'NAME', help: "peak from rankwatch's table (see --list-gpus)" },
  dtype: { kind: 'string', arg: 'D', default: 'bf16', help: 'math precision for the peak' },
  'peak-tflops': { ...positive, arg: 'P', help: 'peak dense TFLOP/s per GPU, instead of --gpu-model' },
  convention: {
    kind: 'enum',
    values: FLOP_CONVENTIONS,
    arg: 'C',
    default: DEFAULT_CONVENTION,
    help: "FLOP counting: palm (6N + 12·L·H·Q·T: MFU's definition in the PaLM paper), megatron (Megatron-LM's per-matmul count with logits), megatron-causal (the same, causal attention halved)",
  },
  json: {
    kind: 'boolean',
    help: 'print JSON: mfu (fraction), flops_per_token, tflops_per_gpu, ..., and implausible (why) when the figure cannot be true (above 100%, below 0.1%)',
  },
  'list-gpus': { kind: 'boolean', help: 'print the peak table with sources' },
});

export const mfu: Command = {
  name: 'mfu',
  usage: `rankwatch mfu --model FILE.json --tokens-per-step T --step-ms X --gpus N
              (--gpu-model NAME [--dtype bf16] | --peak-tflops P)
              [--convention ${FLOP_CONVENTIONS.join('|')}] [--json]

MFU = model FLOPs per second / (GPUs x peak dense FLOP/s of the GPU at the dtype).

${optionsHelp(OPTIONS)}`,
  options: OPTIONS,
  async run(argv) {
    const { values } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    if (values['list-gpus']) {
      console.log(
        table(
          ['GPU', 'bf16', 'fp16', 'fp8', 'tf32', 'source'],
          GPU_SPECS.map((g) => [
            g.name,
            g.peak.bf16 ?? '',
            g.peak.fp16 ?? '',
            g.peak.fp8 ?? '',
            g.peak.tf32 ?? '',
            g.source,
          ]),
        ),
      );
      return 0;
    }
    if (!values.model) throw new RankwatchError('RANKWATCH_ERR_USAGE', '--model FILE.json is required');
    let model: unknown;
    try {
      model = JSON.parse(readFileSync(values.model, 'utf8'));
    } catch (err) {
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        `--model ${values.model}: cannot read it as JSON: ${(err as Error).message}`,
      );
    }
    if (!checkModel.Check(model)) {
      const e = checkModel.Errors(model).First();
      throw new RankwatchError(
        'RANKWATCH_ERR_MODEL',
        `model file ${values.model}: ${e?.path || '(root)'} ${e?.message}`,
      );
    }
    const convention = values.convention;
    const dtype = values.dtype;
    let peak: number;
    if (values['peak-tflops'] !== undefined) peak = values['peak-tflops'] * 1e12;
    else if (values['gpu-model']) peak = peakFlops(values['gpu-model'], dtype);
    else throw new RankwatchError('RANKWATCH_ERR_USAGE', 'give --gpu-model NAME or --peak-tflops P');
    const tokensPerStep = required(values['tokens-per-step'], 'tokens-per-step');
    const stepMs = required(values['step-ms'], 'step-ms');
    const gpus = required(values.gpus, 'gpus');
    const fpt = flopsPerToken(model, convention);
    const r = computeMfu({ flopsPerToken: fpt, tokensPerStep, stepMs, gpus, peakFlopsPerGpu: peak });
    const why = implausibility({
      mfu: r.mfu,
      source: 'cli',
      tokensPerStep,
      gpus,
      peakTflops: peak / 1e12,
      gpuModel: values['gpu-model'],
      dtype: values['gpu-model'] ? dtype : undefined,
    });
    // Said, not assumed silently: the MLP size Megatron-LM would use.
    const ffnDefault =
      model.ffn_hidden === undefined ? defaultFfnHidden(model.hidden, model.swiglu ?? false) : undefined;
    if (values.json) {
      console.log(
        JSON.stringify({
          ...r,
          convention,
          peak_tflops_per_gpu: peak / 1e12,
          dtype,
          ...(ffnDefault !== undefined ? { ffn_hidden_default: ffnDefault } : {}),
          ...(why ? { implausible: why } : {}),
        }),
      );
    } else {
      console.log(
        table(
          ['MFU', 'TFLOP/s per GPU', 'peak TFLOP/s', 'FLOPs per token', 'tokens/s', 'convention'],
          [
            [
              `${(r.mfu * 100).toFixed(2)}%${why ? ' (cannot be true)' : ''}`,
              r.tflops_per_gpu.toFixed(1),
              (peak / 1e12).toFixed(1),
              r.flops_per_token.toExponential(4),
              Math.round(r.tokens_per_s),
              convention,
            ],
          ],
        ),
      );
      if (ffnDefault !== undefined)
        console.log(
          `\nffn_hidden not given: ${ffnDefault}, Megatron-LM's default for ${model.swiglu ? 'a swiglu MLP, int(8h/3/64)*64' : 'a plain MLP, 4h'}.`,
        );
      if (why) console.log(`\n${why}.`);
    }
    return 0;
  },
};
