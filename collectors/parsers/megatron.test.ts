import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { activeParams, estimateParams, flopsPerToken } from '../../mfu/flops.js';
import { validateEvent } from '../../schema/validate.js';
import { MegatronParser, mfuCrossCheck } from './megatron.js';
import { megatronJob, modelFromArgs, paramMismatch } from './megatron_job.js';

const within = (actual: number, expected: number, rel: number) =>
  expect(Math.abs(actual - expected) / expected).toBeLessThan(rel);

const lines = readFileSync(join(import.meta.dirname, 'fixtures', 'megatron.log'), 'utf8').split('\n');
const NOW = 1_764_480_000_000;
const ctx = { job: 'llama-13b', rank: 63, host: 'gpu-0008', gpu: 7, seqLen: 4096 };

function parseAll() {
  const p = new MegatronParser(ctx);
  const out = lines.filter(Boolean).map((l, i) => p.push(l, NOW + i));
  return {
    events: [...out.flatMap((o) => o.events), ...p.flushPending()],
    problems: out.flatMap((o) => o.problems),
  };
}

describe('Megatron-LM log → step and checkpoint events', () => {
  const { events, problems } = parseAll();
  const steps = events.filter((e) => e.kind === 'step');
  const ckpts = events.filter((e) => e.kind === 'checkpoint');

  it('turns iteration lines into step events with the configured job/rank/host/gpu', () => {
    expect(steps.map((s) => [s.step, s.step_ms])).toEqual([
      [1001, 9123.4],
      [1002, 9101.7],
      [1003, 9150],
      [1007, 9104.9],
      [1009, 9100],
    ]);
    for (const s of steps) {
      expect(validateEvent(s).ok).toBe(true);
      expect(s).toMatchObject({ job: 'llama-13b', rank: 63, host: 'gpu-0008', gpu: 7, timing: 'wall_only' });
    }
    expect(steps[0]).toMatchObject({
      megatron_tflops_per_gpu: 313.1,
      global_batch_size: 512,
      global_batch_tokens: 512 * 4096,
      train_iters: 500000,
      ts: new Date(2026, 10, 30, 5, 1, 40).getTime(),
    });
    expect(steps[2]).not.toHaveProperty('megatron_tflops_per_gpu');
    expect(steps[2].ts).toBe(NOW + 7);
  });

  it('pairs saved-checkpoint lines with the save-checkpoint timer, and reads loads', () => {
    expect(ckpts.map((c) => [c.phase, c.step, c.dur_ms, c.duration_known])).toEqual([
      ['load', 1000, 0, false],
      ['save', 1003, 21077.56, undefined],
      ['save', 1008, 0, false],
    ]);
    for (const c of ckpts) expect(validateEvent(c).ok).toBe(true);
  });

  it('reports truncated and garbled iteration lines by line number', () => {
    expect(problems.map((p) => p.line)).toEqual([13, 14, 15]);
  });

  it('cross-checks Megatron TFLOP/s against ours', () => {
    const model = {
      layers: 40,
      hidden: 5120,
      heads: 40,
      seq_len: 4096,
      vocab: 32000,
      ffn_hidden: 13824,
      swiglu: true,
    };
    const c = mfuCrossCheck(steps[0], flopsPerToken(model, 'megatron'), 64);
    expect(c).toBeDefined();
    expect(c!.megatron_tflops_per_gpu).toBe(313.1);
    // Same convention as Megatron's own formula: within a few percent.
    expect(c!.ratio).toBeGreaterThan(0.97);
    expect(c!.ratio).toBeLessThan(1.03);
    expect(mfuCrossCheck(steps[2], 1e9, 64)).toBeUndefined();
  });
});

const fixture = (name: string) => readFileSync(join(import.meta.dirname, 'fixtures', name), 'utf8');

/** Feeds a log the way the file tail hands it over: split on \n, \r left on CRLF lines. */
function feed(text: string, c = ctx) {
  const p = new MegatronParser({ ...c });
  const out = text.split('\n').map((l, i) => p.push(l, NOW + i));
  return {
    parser: p,
    steps: out.flatMap((o) => o.events).filter((e) => e.kind === 'step'),
    problems: out.flatMap((o) => o.problems),
  };
}

describe('a real Megatron-LM log (GPT-2 345M, tp 2 x pp 2, llm-action model_train.md)', () => {
  const text = fixture('megatron-gpt345m-tp2pp2.log');
  const gpt345m = {
    layers: 24,
    hidden: 1024,
    heads: 16,
    ffn_hidden: 4096,
    swiglu: false,
    seq_len: 1024,
    vocab: 50432,
  };

  it('counts only iteration lines as iterations: memory reports and validation lines are no problems', () => {
    const { steps, problems } = feed(text);
    expect(problems).toEqual([]);
    expect(steps.map((s) => [s.step, s.step_ms, s.global_batch_size])).toEqual([
      [100, 858.6, 16],
      [200, 1082.6, 16],
      [1000, 1109.8, 16],
      [1100, 839.6, 16],
      [2000, 1031.7, 16],
    ]);
  });

  it('keeps the arguments block, the layout line, the padded vocabulary and the parameter counts', () => {
    const { parser } = feed(text);
    const run = parser.run;
    expect(run.layout).toEqual({ world: 4, dp: 1, cp: undefined, tp: 2, pp: 2 });
    expect(run.paddedVocab).toBe(50432);
    expect(run.rankParams.size).toBe(4);
    expect(modelFromArgs(run)).toEqual(gpt345m);
    expect(paramMismatch(run, gpt345m)).toBeUndefined();
    // A config that is not the model that runs is said, with both counts.
    expect(paramMismatch(run, { ...gpt345m, layers: 30 })).toMatch(
      /0\.408B parameters \(the sum over its 4 tensor\/pipeline ranks\), the model config gives 0\.48\dB/,
    );
  });

  it('describes the job for MFU from the log, the config adding the GPU model', () => {
    const { parser } = feed(text);
    const j = megatronJob(parser.run, { job: 'gpt', gpuModel: 'A800' }, NOW, 16);
    expect(j.missing).toEqual([]);
    expect(j.event).toMatchObject({
      kind: 'job',
      world_size: 4,
      gpu_model: 'A800',
      dtype: 'fp16',
      parallel: { tp: 2, pp: 2, dp: 1, cp: 1 },
      model: gpt345m,
      global_batch_tokens: 16 * 1024,
    });
    expect(validateEvent(j.event).ok).toBe(true);
    // Without the GPU model the job is still described, and what is missing names the field.
    const bare = megatronJob(parser.run, { job: 'gpt' }, NOW, 16);
    expect(bare.event?.gpu_model).toBe('unknown');
    expect(bare.missing.join()).toMatch(/`gpuModel`/);
  });

  it('reads the same log with CRLF line ends, tabs, a shipper prefix and a cut last line', () => {
    const clean = feed(text);
    const crlf = feed(text.replaceAll('\n', '\r\n'));
    expect(crlf.problems).toEqual([]);
    expect(crlf.steps).toEqual(clean.steps);
    expect(crlf.parser.run.args).toEqual(clean.parser.run.args);
    // kubectl logs --timestamps / srun -l style prefixes, and tabs for spaces.
    const prefixed = feed(
      text
        .split('\n')
        .map((l) => `2023-07-16T12:25:43.000000000Z 0: ${l.replaceAll(' | ', '\t|\t')}`)
        .join('\n'),
    );
    expect(prefixed.steps.map((s) => [s.step, s.step_ms])).toEqual(
      clean.steps.map((s) => [s.step, s.step_ms]),
    );
    expect(prefixed.parser.run.layout).toEqual(clean.parser.run.layout);
    // A file cut mid-line: the last iteration is one problem, the others stand.
    const iter = text.indexOf(' iteration     2000/');
    const cut = feed(text.slice(0, iter + 80));
    expect(cut.steps.map((s) => s.step)).toEqual([100, 200, 1000, 1100]);
    expect(cut.problems).toHaveLength(1);
  });
});

describe('MoE against a published figure: Mixtral 8x7B on 16 H100 (NVIDIA/Megatron-LM#756)', () => {
  // From the arguments block: hidden 4096, ffn 14336, GQA, global batch 128, 16 GPUs (tp 4,
  // dp 4, ep 8). Mixtral's published shape (vllm-project/vllm#1991): 32 layers, 32 heads, 8 KV
  // heads, 8 experts, top-2, vocabulary 32000. The sequence length is not in the part of the log we
  // could read; 2048 is the one at which Megatron's own count gives the printed TFLOP/s.
  const mixtral = {
    layers: 32,
    hidden: 4096,
    heads: 32,
    kv_heads: 8,
    ffn_hidden: 14336,
    swiglu: true,
    experts: 8,
    top_k: 2,
    seq_len: 2048,
    vocab: 32000,
  };

  it('keeps Megatron’s own time behind a launcher prefix', () => {
    const text = fixture('megatron-mixtral-8x7b-h100.log')
      .split('\n')
      .map((l) => `[default3]:${l}`)
      .join('\r\n');
    const { steps, problems } = feed(text, { ...ctx, seqLen: 2048 });
    expect(problems).toEqual([]);
    expect(steps[0].ts).toBe(new Date(2024, 2, 30, 20, 2, 40).getTime());
    expect(steps.map((s) => s.megatron_tflops_per_gpu)).toEqual([
      137.5, 130.1, 128.1, 239.8, 236, 228.4, 243.6, 238.7, 224,
    ]);
  });

  it('reproduces every printed TFLOP/s/GPU to within 0.2% with the megatron convention (top-2, not all 8)', () => {
    const { steps, problems, parser } = feed(fixture('megatron-mixtral-8x7b-h100.log'), {
      ...ctx,
      seqLen: 2048,
    });
    expect(problems).toEqual([]);
    expect(steps).toHaveLength(9);
    expect(parser.run.layout).toMatchObject({ world: 16, dp: 4, cp: 1, tp: 4, pp: 1 });
    expect(modelFromArgs(parser.run)).toMatchObject({ hidden: 4096, ffn_hidden: 14336 });
    const fpt = flopsPerToken(mixtral, 'megatron');
    for (const s of steps) {
      const c = mfuCrossCheck(s, fpt, 16)!;
      expect(Math.abs(c.ratio - 1), `iteration ${s.step}`).toBeLessThan(0.002);
    }
    // Counting all experts would claim about 3.3x the work.
    const allExperts = flopsPerToken({ ...mixtral, top_k: 8 }, 'megatron');
    expect(allExperts / fpt).toBeGreaterThan(3);
  });

  it('counts 46.7B parameters and 12.9B active ones, as Mistral publishes (PaLM-style MFU uses the active)', () => {
    within(estimateParams(mixtral), 46.7e9, 0.005);
    within(activeParams(mixtral), 12.9e9, 0.005);
    expect(flopsPerToken(mixtral, 'palm')).toBeCloseTo(6 * activeParams(mixtral) + 12 * 32 * 4096 * 2048, -3);
    // Given total params, the idle experts are still taken out.
    within(activeParams({ ...mixtral, params: 46.7e9 }), 12.9e9, 0.005);
  });
});

describe('a Megatron log with a print glued to the iteration line (Llama 3.1 8B, NVIDIA/dgxc-benchmarking)', () => {
  const llama8b = {
    layers: 32,
    hidden: 4096,
    heads: 32,
    kv_heads: 8,
    ffn_hidden: 14336,
    swiglu: true,
    seq_len: 8192,
    vocab: 128256,
  };

  it('reads the step and the parameter count, with no problem', () => {
    const { steps, problems, parser } = feed(fixture('megatron-llama31-8b-dgxc.log'));
    expect(problems).toEqual([]);
    expect(steps.map((s) => [s.step, s.step_ms, s.global_batch_size])).toEqual([[1, 20289.1, 128]]);
    expect(parser.run.totalParamsB).toBe(8.03);
    // Llama 3.1 8B's published shape gives the printed 8.03B; a config with 36 layers does not.
    expect(paramMismatch(parser.run, llama8b)).toBeUndefined();
    expect(paramMismatch(parser.run, { ...llama8b, layers: 36 })).toMatch(
      /Megatron counts 8\.030B parameters \("Total number of parameters in billions"\), the model config gives 8\.9\d\dB/,
    );
  });
});
