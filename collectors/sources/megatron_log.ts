/**
 * Tails a Megatron-LM training log → step and checkpoint events for the configured
 * job/rank/host/gpu. With the model config and GPU count it cross-checks Megatron's own
 * TFLOP/s/GPU against ours (the megatron FLOP convention) on every step and warns when they part.
 */
import { Type } from '@sinclair/typebox';
import { flopsPerToken } from '../../detectors/mfu/flops.js';
import type { ModelConfig } from '../../schema/events.js';
import { MegatronParser, mfuCrossCheck } from '../parsers/megatron.js';
import { type SourceFactory, sourceName } from '../source.js';
import { tailLines } from './lines.js';

const schema = Type.Object(
  {
    type: Type.Literal('megatron_log'),
    name: Type.Optional(Type.String()),
    path: Type.String({ description: 'the training log file (stdout of the last rank, usually)' }),
    from: Type.Union([Type.Literal('start'), Type.Literal('end')], {
      default: 'end',
      description: 'on first open: only new lines (end) or the whole file (start)',
    }),
    pollMs: Type.Integer({ minimum: 50, default: 500 }),
    job: Type.String({ description: 'job id' }),
    rank: Type.Integer({ minimum: 0, default: 0, description: 'rank that writes this log' }),
    gpu: Type.Integer({ minimum: 0, default: 0, description: 'GPU index of that rank on this host' }),
    host: Type.Optional(Type.String({ description: 'host of that rank (default: this node)' })),
    seqLen: Type.Optional(Type.Integer({ minimum: 1, description: 'sequence length, for tokens per step' })),
    model: Type.Optional(
      Type.Unknown({ description: 'model config (v1 job.model) for the MFU cross-check' }),
    ),
    gpus: Type.Optional(
      Type.Integer({ minimum: 1, description: 'GPUs in the job, for the MFU cross-check' }),
    ),
    mismatchPct: Type.Number({
      minimum: 0,
      default: 10,
      description: 'warn when the two TFLOP/s differ by more',
    }),
  },
  { additionalProperties: false },
);

export const megatronLog: SourceFactory<typeof schema> = {
  type: 'megatron_log',
  description: 'step and checkpoint events from a Megatron-LM log, with an MFU cross-check',
  schema,
  create(cfg, deps) {
    const name = sourceName('megatron_log', cfg.name);
    const model = cfg.model as ModelConfig | undefined;
    const seqLen = cfg.seqLen ?? model?.seq_len;
    const parser = new MegatronParser({
      job: cfg.job,
      rank: cfg.rank,
      gpu: cfg.gpu,
      host: cfg.host ?? deps.host,
      seqLen,
    });
    const fpt = model && cfg.gpus ? flopsPerToken(model, 'megatron') : undefined;
    let warned = false;
    const input = tailLines(name, cfg, deps, (lines) => {
      const events: unknown[] = [];
      for (const line of lines) {
        const out = parser.push(line, deps.now());
        if (out.problems.length) deps.parseProblems(name, out.problems);
        for (const e of out.events) {
          if (e.kind === 'step' && fpt && cfg.gpus) {
            const c = mfuCrossCheck(e, fpt, cfg.gpus);
            if (c) {
              e.ours_tflops_per_gpu = Math.round(c.ours_tflops_per_gpu * 10) / 10;
              e.tflops_ratio = Math.round(c.ratio * 1000) / 1000;
              if (!warned && Math.abs(c.ratio - 1) * 100 > cfg.mismatchPct) {
                warned = true;
                deps.logger.warn(
                  `${name}: Megatron reports ${c.megatron_tflops_per_gpu} TFLOP/s/GPU, the model config gives ${c.ours_tflops_per_gpu.toFixed(1)}: check the model config (recompute, MoE, seq_len) given to rankwatch`,
                );
              }
            }
          }
          events.push(e);
        }
      }
      if (events.length) deps.emit(events);
    });
    return {
      type: 'megatron_log',
      name,
      start: () => input.start(),
      stop: async () => {
        await input.stop();
        const rest = parser.flushPending();
        if (rest.length) deps.emit(rest);
      },
    };
  },
};
