/**
 * A job tailed only from its Megatron-LM log gets MFU: the source describes the job from the
 * log's own arguments (plus the GPU model from the config), and the runner turns the steps into
 * MFU points. Real log: llm-action's GPT-2 345M run (see the fixture's header).
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Value } from '@sinclair/typebox/value';
import { afterAll, describe, expect, it } from 'vitest';
import { DetectorRunner } from '../../detectors/runner.js';
import { flopsPerToken } from '../../mfu/flops.js';
import type { RankwatchEvent } from '../../schema/events.js';
import { validateEvent } from '../../schema/validate.js';
import { megatronLog } from './megatron_log.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-megatron-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const log = join(dir, 'train.log');
copyFileSync(join(import.meta.dirname, '..', 'parsers', 'fixtures', 'megatron-gpt345m-tp2pp2.log'), log);

async function tail(extra: Record<string, unknown>) {
  const events: RankwatchEvent[] = [];
  const warnings: string[] = [];
  const problems: unknown[] = [];
  const cfg = Value.Default(megatronLog.schema, {
    type: 'megatron_log',
    path: log,
    from: 'start',
    pollMs: 50,
    job: 'gpt-345m',
    rank: 3,
    gpu: 3,
    ...extra,
  });
  const src = megatronLog.create(cfg as never, {
    host: 'a800-node',
    logger: { info: () => {}, warn: (m: string) => warnings.push(m) },
    now: () => Date.UTC(2023, 6, 16, 12, 30),
    emit: (es) => events.push(...(es as RankwatchEvent[])),
    parseProblems: (_s, p) => problems.push(...p),
    sourceError: (_s, err) => {
      throw err;
    },
    pciMap: new Map(),
  });
  src.start();
  const end = Date.now() + 20_000;
  while (events.filter((e) => e.kind === 'step').length < 5 && Date.now() < end)
    await new Promise((r) => setTimeout(r, 50));
  await src.stop();
  return { events, warnings, problems };
}

describe('megatron_log source: MFU for a job known only from its log', () => {
  it('sends the job event before the first step, from the log and gpuModel, and the runner gives MFU', async () => {
    const { events, warnings, problems } = await tail({ gpuModel: 'A800' });
    expect(problems).toEqual([]);
    expect(warnings).toEqual([]);
    const jobs = events.filter((e) => e.kind === 'job');
    expect(jobs).toHaveLength(1);
    expect(events.findIndex((e) => e.kind === 'job')).toBeLessThan(
      events.findIndex((e) => e.kind === 'step'),
    );
    for (const e of events) expect(validateEvent(e).ok).toBe(true);
    const job = jobs[0];
    expect(job).toMatchObject({
      world_size: 4,
      gpu_model: 'A800',
      dtype: 'fp16',
      global_batch_tokens: 16 * 1024,
    });

    const runner = new DetectorRunner();
    for (const e of events) runner.push(e);
    runner.flush();
    const out = runner.take();
    expect(out.mfu.map((p) => p.step)).toEqual([100, 200, 1000, 1100, 2000]);
    const fpt = flopsPerToken(job.kind === 'job' ? job.model! : ({} as never), 'palm');
    for (const p of out.mfu) {
      expect(p.implausible).toBeUndefined();
      expect(p.mfu).toBeCloseTo((fpt * 16 * 1024) / (p.step_ms / 1000) / 4 / 312e12, 12);
    }
    expect(out.findings.filter((f) => f.type === 'mfu_unavailable')).toEqual([]);
  });

  it('without gpuModel: says once what to set, and the runner says once that MFU is missing and why', async () => {
    const { events, warnings } = await tail({});
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/no MFU for job gpt-345m until the config gives the GPU model .*`gpuModel`/);
    const runner = new DetectorRunner();
    for (const e of events) runner.push(e);
    runner.flush();
    const out = runner.take();
    expect(out.mfu).toEqual([]);
    const notes = out.findings.filter((f) => f.type === 'mfu_unavailable');
    expect(notes).toHaveLength(1);
    expect(notes[0].summary).toMatch(/GPU model "unknown" .* gpuModel/);
  });

  it('warns once when the model config is not the model the log counts', async () => {
    const { warnings } = await tail({
      gpuModel: 'A800',
      model: { layers: 36, hidden: 1024, heads: 16, seq_len: 1024, vocab: 50432 },
    });
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/Megatron counts 0\.408B parameters/);
  });
});

describe('megatron_log source on an MoE run (Mixtral 8x7B, NVIDIA/Megatron-LM#756)', () => {
  it('takes what the log lacks from the config, and its TFLOP/s match Megatron’s on every step', async () => {
    const moeLog = join(dir, 'mixtral.log');
    copyFileSync(
      join(import.meta.dirname, '..', 'parsers', 'fixtures', 'megatron-mixtral-8x7b-h100.log'),
      moeLog,
    );
    const events: RankwatchEvent[] = [];
    const warnings: string[] = [];
    const cfg = Value.Default(megatronLog.schema, {
      type: 'megatron_log',
      path: moeLog,
      from: 'start',
      pollMs: 50,
      job: 'mixtral',
      gpuModel: 'H100-SXM',
      // The log shows hidden and ffn sizes; the rest is Mixtral's published shape.
      model: {
        layers: 32,
        heads: 32,
        kv_heads: 8,
        swiglu: true,
        experts: 8,
        top_k: 2,
        seq_len: 2048,
        vocab: 32000,
      },
    });
    const src = megatronLog.create(cfg as never, {
      host: 'h100-node',
      logger: { info: () => {}, warn: (m: string) => warnings.push(m) },
      now: () => 0,
      emit: (es) => events.push(...(es as RankwatchEvent[])),
      parseProblems: () => {},
      sourceError: (_s, err) => {
        throw err;
      },
      pciMap: new Map(),
    });
    src.start();
    const end = Date.now() + 20_000;
    while (events.filter((e) => e.kind === 'step').length < 9 && Date.now() < end)
      await new Promise((r) => setTimeout(r, 50));
    await src.stop();
    expect(warnings).toEqual([]);
    const job = events.find((e) => e.kind === 'job');
    expect(job).toMatchObject({
      world_size: 16,
      dtype: 'bf16',
      parallel: { tp: 4, pp: 1, dp: 4, cp: 1, ep: 8 },
      model: { hidden: 4096, ffn_hidden: 14336, experts: 8, top_k: 2 },
      global_batch_tokens: 128 * 2048,
    });
    const steps = events.filter((e) => e.kind === 'step') as (RankwatchEvent & { tflops_ratio?: number })[];
    expect(steps).toHaveLength(9);
    for (const s of steps) expect(Math.abs((s.tflops_ratio ?? 0) - 1)).toBeLessThan(0.003);
  });
});
