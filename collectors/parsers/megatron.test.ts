import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { flopsPerToken } from '../../detectors/mfu/flops.js';
import { validateEvent } from '../../schema/validate.js';
import { MegatronParser, mfuCrossCheck } from './megatron.js';

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
