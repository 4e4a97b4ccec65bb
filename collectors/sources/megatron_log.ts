/**
 * Tails a Megatron-LM training log → step and checkpoint events for the configured
 * job/rank/host/gpu, and the job's description (a `job` event) for MFU: from what the log printed
 * before training (arguments block, layout line, padded vocabulary), with this config's `model`,
 * `gpus`, `gpuModel`, `dtype` and `parallel` on top. What MFU still lacks (the GPU model, which a
 * Megatron log never prints, or the model when the log holds no arguments block) is said once.
 * With a model and GPU count it also cross-checks Megatron's own TFLOP/s/GPU against ours (the
 * megatron FLOP convention) on every step, and warns once when they part or when the parameter
 * count Megatron printed disagrees with the model config by more than 2%.
 */
import { Type } from '@sinclair/typebox';
import { flopsPerToken } from '../../mfu/flops.js';
import { findGpu } from '../../mfu/peaks.js';
import type { ModelConfig } from '../../schema/events.js';
import { MegatronParser, mfuCrossCheck } from '../parsers/megatron.js';
import { megatronJob, paramMismatch } from '../parsers/megatron_job.js';
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
      Type.Unknown({
        description:
          'model config (v1 job.model fields); wins over the log’s arguments block, which gives it when absent',
      }),
    ),
    gpus: Type.Optional(
      Type.Integer({ minimum: 1, description: 'GPUs in the job (default: the log’s world size)' }),
    ),
    gpuModel: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          'GPU model for MFU, e.g. H100-SXM (a Megatron log never says it; see rankwatch mfu --list-gpus)',
      }),
    ),
    dtype: Type.Optional(
      Type.String({
        minLength: 1,
        description: 'training dtype for the peak (default: bf16/fp16/fp8 from the log)',
      }),
    ),
    parallel: Type.Optional(
      Type.Object(
        {
          tp: Type.Optional(Type.Integer({ minimum: 1 })),
          pp: Type.Optional(Type.Integer({ minimum: 1 })),
          dp: Type.Optional(Type.Integer({ minimum: 1 })),
          cp: Type.Optional(Type.Integer({ minimum: 1 })),
          ep: Type.Optional(Type.Integer({ minimum: 1 })),
        },
        { additionalProperties: false, description: 'parallel layout (default: from the log)' },
      ),
    ),
    mismatchPct: Type.Number({
      minimum: 0,
      default: 10,
      description: 'warn when the two TFLOP/s differ by more',
    }),
  },
  { additionalProperties: false },
);

const both = (m: ModelConfig): [number, number] => [
  flopsPerToken(m, 'megatron'),
  flopsPerToken(m, 'megatron-causal'),
];

export const megatronLog: SourceFactory<typeof schema> = {
  type: 'megatron_log',
  description:
    'step and checkpoint events and the job description from a Megatron-LM log, with an MFU cross-check',
  schema,
  create(cfg, deps) {
    const name = sourceName('megatron_log', cfg.name);
    const given = cfg.model as Partial<ModelConfig> | undefined;
    const parser = new MegatronParser({
      job: cfg.job,
      rank: cfg.rank,
      gpu: cfg.gpu,
      host: cfg.host ?? deps.host,
      seqLen: cfg.seqLen ?? given?.seq_len,
    });
    if (cfg.gpuModel && !findGpu(cfg.gpuModel))
      deps.logger.warn(
        `${name}: gpuModel "${cfg.gpuModel}" has no peak in rankwatch's table, so job ${cfg.job} gets no MFU: set gpuModel to one of \`rankwatch mfu --list-gpus\``,
      );
    const jobCfg = { ...cfg, model: given };
    let jobGbs: number | undefined;
    let jobSent = false;
    let saidMissing = false;
    /** FLOPs per token in the megatron convention, and the causal one Megatron-LM uses since 2025. */
    let fpt: [number, number] | undefined;
    let causal: boolean | undefined;
    let world: number | undefined;
    let warnedRatio = false;

    /** The job event, when it is new or its batch changed (rampup); warns once about what is missing. */
    const describe = (ts: number, gbs: number | undefined): unknown[] => {
      if (jobSent && gbs === jobGbs) return [];
      const j = megatronJob(parser.run, jobCfg, ts, gbs);
      if (!j.event) {
        if (!saidMissing && j.missing.length) {
          saidMissing = true;
          deps.logger.warn(
            `${name}: no MFU for job ${cfg.job} until the config gives ${j.missing.join('; ')}`,
          );
        }
        if (j.model && cfg.gpus) {
          fpt ??= both(j.model);
          world ??= cfg.gpus;
        }
        return [];
      }
      if (!saidMissing && j.missing.length) {
        saidMissing = true;
        deps.logger.warn(`${name}: no MFU for job ${cfg.job} until the config gives ${j.missing.join('; ')}`);
      }
      if (!jobSent && j.model) {
        const off = paramMismatch(parser.run, j.model);
        if (off) deps.logger.warn(`${name}: ${off}`);
      }
      jobSent = true;
      jobGbs = gbs;
      fpt = j.model ? both(j.model) : undefined;
      world = j.event.world_size;
      if (!parser.hasSeqLen() && j.model) parser.setSeqLen(j.model.seq_len);
      return [j.event];
    };

    const input = tailLines(name, cfg, deps, (lines) => {
      const events: unknown[] = [];
      for (const line of lines) {
        const out = parser.push(line, deps.now());
        if (out.problems.length) deps.parseProblems(name, out.problems);
        for (const e of out.events) {
          if (e.kind === 'step') {
            const gbs = typeof e.global_batch_size === 'number' ? e.global_batch_size : undefined;
            events.push(...describe(e.ts, gbs));
            if (e.global_batch_tokens === undefined && gbs !== undefined && parser.hasSeqLen())
              parser.addTokens(e, gbs);
            if (fpt && world) {
              // Which of Megatron's two counts the log uses, from the first step that says.
              if (causal === undefined) {
                const full = mfuCrossCheck(e, fpt[0], world);
                const half = mfuCrossCheck(e, fpt[1], world);
                if (full && half) causal = Math.abs(half.ratio - 1) < Math.abs(full.ratio - 1);
              }
              const c = mfuCrossCheck(e, fpt[causal ? 1 : 0], world);
              if (c) {
                e.ours_tflops_per_gpu = Math.round(c.ours_tflops_per_gpu * 10) / 10;
                e.tflops_ratio = Math.round(c.ratio * 1000) / 1000;
                if (!warnedRatio && Math.abs(c.ratio - 1) * 100 > cfg.mismatchPct) {
                  warnedRatio = true;
                  deps.logger.warn(
                    `${name}: Megatron reports ${c.megatron_tflops_per_gpu} TFLOP/s/GPU, the model config gives ${c.ours_tflops_per_gpu.toFixed(1)}: check the model config (recompute, MoE, seq_len) given to rankwatch`,
                  );
                }
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
