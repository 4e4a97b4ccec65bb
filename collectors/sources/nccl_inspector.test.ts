/**
 * The nccl_inspector source over a real folder the way the plugin fills it: a dump file that
 * appears after the collector started, grows, is rotated; another node's file in the shared
 * folder; a process no step event names; a Prometheus textfile rewritten each interval.
 */
import { appendFileSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Value } from '@sinclair/typebox/value';
import { afterAll, describe, expect, it } from 'vitest';
import type { CollectiveEvent } from '../../schema/events.js';
import { validateEvent } from '../../schema/validate.js';
import { inspectorLine } from '../parsers/nccl_inspector_format.js';
import { RankMap } from '../ranks.js';
import { ncclInspector } from './nccl_inspector.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-inspector-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const T0 = Date.now() - 120_000;
/** Rank r (pid 5000 + r) ends step s at T0 + 1000 (s + 1). */
const steps = (ranks: RankMap, rank: number, upTo: number) =>
  ranks.learn(
    Array.from({ length: upTo + 1 }, (_, s) => ({
      v: 1,
      kind: 'step',
      ts: T0 + 1000 * (s + 1),
      job: 'llm',
      rank,
      host: 'node-a',
      gpu: rank,
      pid: 5000 + rank,
      step: s,
      step_ms: 1000,
      compute_ms: 700,
    })),
  );
/** An AllReduce of `pid` dumped `atMs` after T0. */
const rec = (host: string, pid: number, seq: number, atMs: number, execUs = 2000) =>
  `${inspectorLine({
    comm: '0x9b4e2c6d11f0a7',
    commName: 'DP Group 0',
    commRank: pid % 8,
    nranks: 8,
    nnodes: 2,
    hostname: host,
    pid,
    dumpUs: (T0 + atMs) * 1000,
    func: 'AllReduce',
    seq,
    bytes: 1 << 28,
    execUs,
    algobwGbs: 134.2,
    busbwGbs: 234.9,
  })}\n`;

async function until<T>(what: string, fn: () => T | undefined, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('nccl_inspector source', () => {
  it('follows new, growing, rotated and rewritten files; skips other hosts; counts the unmappable', async () => {
    const events: (CollectiveEvent & Record<string, unknown>)[] = [];
    const dropped: Record<string, number> = {};
    const problems: unknown[] = [];
    const ranks = new RankMap({
      localHosts: ['node-a'],
      readEnviron: () => {
        throw Object.assign(new Error('gone'), { code: 'ENOENT' });
      },
    });
    steps(ranks, 0, 3);
    steps(ranks, 1, 3);
    writeFileSync(join(dir, 'node-a-pid5000.log'), rec('node-a', 5000, 1, 500)); // there before: from the end
    const cfg = Value.Default(ncclInspector.schema, {
      type: 'nccl_inspector',
      dir,
      pollMs: 50,
      scanMs: 100,
      holdMs: 1500,
      settleMs: 300,
    });
    const src = ncclInspector.create(cfg as never, {
      host: 'node-a',
      logger: { info: () => {}, warn: () => {} },
      now: Date.now,
      emit: (es) => events.push(...(es as typeof events)),
      parseProblems: (_s, p) => problems.push(...p),
      sourceError: (_s, err) => {
        throw err;
      },
      pciMap: new Map(),
      ranks,
      dropped: (_s, reason, n) => {
        dropped[reason] = (dropped[reason] ?? 0) + n;
      },
    });
    src.start();
    await new Promise((r) => setTimeout(r, 300));
    // Step 1 of rank 0 grows in the file that was there; rank 1's file appears now (read from its start).
    appendFileSync(
      join(dir, 'node-a-pid5000.log'),
      rec('node-a', 5000, 2, 1200) + rec('node-a', 5000, 3, 1700),
    );
    writeFileSync(
      join(dir, 'node-a-pid5001.log'),
      rec('node-a', 5001, 2, 1300, 2500) + rec('node-a', 5001, 3, 1800),
    );
    // Another node's file in the shared folder, and a process nobody named.
    writeFileSync(join(dir, 'node-b-pid7000.log'), rec('node-b', 7000, 2, 1300));
    writeFileSync(join(dir, 'node-a-pid5999.log'), rec('node-a', 5999, 2, 1300));
    const step1 = await until('step 1 of both ranks', () => {
      const s = events.filter((e) => e.step === 1);
      return s.length === 2 ? s : undefined;
    });
    expect(step1.map((e) => [e.rank, e.count, e.seq, e.dur_ms]).sort()).toEqual([
      [0, 2, 3, 4],
      [1, 2, 3, 4.5],
    ]);

    // Rotation: the last line goes to the old file, then a new file takes the name.
    appendFileSync(join(dir, 'node-a-pid5000.log'), rec('node-a', 5000, 4, 2300));
    renameSync(join(dir, 'node-a-pid5000.log'), join(dir, 'node-a-pid5000.log.1'));
    writeFileSync(
      join(dir, 'node-a-pid5000.log'),
      rec('node-a', 5000, 5, 2600) + rec('node-a', 5000, 6, 3400),
    );
    await until('steps 2 and 3 of rank 0', () =>
      events.filter((e) => e.rank === 0 && e.step >= 2).length === 2 ? true : undefined,
    );
    expect(events.filter((e) => e.rank === 0).map((e) => [e.step, e.count, e.seq])).toEqual([
      [1, 2, 3],
      [2, 2, 5],
      [3, 1, 6],
    ]);

    // Prometheus mode: each rewritten snapshot read once; its aggregates go to the rank owning the GPU.
    const prom = readFileSync(
      join(import.meta.dirname, '..', 'parsers', 'fixtures', 'nccl-inspector', 'readme-v5.1.prom'),
      'utf8',
    )
      .replaceAll('nvl72004-T01', 'node-a')
      .replaceAll('GPU0', 'GPU1');
    writeFileSync(join(dir, 'nccl_inspector_metrics_GPU-5f1c6a3e.prom'), prom);
    await until('the first snapshot', () => (events.some((e) => e.agg === 'mean') ? true : undefined));
    writeFileSync(join(dir, 'nccl_inspector_metrics_GPU-5f1c6a3e.prom'), prom.replace('9498.47', '19001.2'));
    await until('the second snapshot', () =>
      events.filter((e) => e.agg === 'mean').length === 4 ? true : undefined,
    );
    await until('the unmapped pid to be counted', () => (dropped.unmapped_pid ? true : undefined));
    await src.stop();

    const means = events.filter((e) => e.agg === 'mean');
    expect(means.map((e) => [e.rank, e.gpu, e.op, e.window, e.dur_ms, e.bytes])).toEqual([
      [1, 1, 'allreduce', 'interval', 9.498, 4 * 1024 ** 3],
      [1, 1, 'send', 'interval', 1.155, 512 * 1024 ** 2],
      [1, 1, 'allreduce', 'interval', 19.001, 4 * 1024 ** 3],
      [1, 1, 'send', 'interval', 1.155, 512 * 1024 ** 2],
    ]);
    expect(events.some((e) => e.host === 'node-b' || e.rank > 1)).toBe(false);
    expect(dropped).toEqual({ unmapped_pid: 1 });
    expect(problems).toEqual([]);
    for (const e of events) expect(validateEvent(e).ok).toBe(true);
  }, 60_000);
});
