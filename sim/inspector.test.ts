/**
 * The simulator's NCCL Inspector dumps, read back by the collector's own parser: every simulated
 * collective is there as the plugin would have written it (per process file, sequence numbers,
 * communicator hashes and ranks, bytes, times, bus bandwidth), the hook's steps carry the pid of
 * their process, and a rank that stops emitting stops writing.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InspectorJsonReader, type InspectorOp } from '../collectors/parsers/nccl_inspector.js';
import type { CollectiveEvent, RankwatchEvent, StepEvent } from '../schema/events.js';
import { validateEvent } from '../schema/validate.js';
import { ClusterSim, type SimOptions } from './cluster.js';
import { type InspectorDumpOptions, InspectorDumps } from './inspector.js';

const root = mkdtempSync(join(tmpdir(), 'rankwatch-sim-inspector-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;

/** Writes a job's dumps (events filtered by `keep`); returns what went out and what the files hold. */
function write(opts: SimOptions, o: Partial<InspectorDumpOptions> = {}, keep = (_e: RankwatchEvent) => true) {
  const dir = join(root, String(dirs++));
  const sim = new ClusterSim(opts);
  const dumps = new InspectorDumps(sim, { dir, ...o });
  const native: RankwatchEvent[] = [];
  const sent: RankwatchEvent[] = [];
  for (const e of sim.events()) {
    if (!keep(e)) continue;
    native.push(e);
    const out = dumps.take(e);
    if (out) sent.push(out);
  }
  dumps.close();
  const files = new Map<string, InspectorOp[]>();
  for (const name of readdirSync(dir)) {
    const reader = new InspectorJsonReader();
    const ops = readFileSync(join(dir, name), 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((line, i) => {
        const r = reader.push(line, i + 1);
        expect(r.problem).toBeUndefined();
        return r.op!;
      });
    files.set(name, ops);
  }
  return { sim, native, sent, files, records: dumps.records };
}

function groupBy<T>(xs: T[], key: (x: T) => string): Map<string, T[]> {
  const m = new Map<string, T[]>();
  for (const x of xs) m.set(key(x), [...(m.get(key(x)) ?? []), x]);
  return m;
}

const collectives = (es: RankwatchEvent[]) => es.filter((e): e is CollectiveEvent => e.kind === 'collective');
const stepsOf = (es: RankwatchEvent[]) => es.filter((e): e is StepEvent => e.kind === 'step');

describe('simulated NCCL Inspector dumps', () => {
  it('hold every simulated collective, one file per process, as the plugin writes them', () => {
    // 64 ranks: tp 8, pp 4, dp 2; 8 hosts.
    const { native, sent, files, records } = write({ ranks: 64, steps: 6, seed: 3, telemetry: false });
    const coll = collectives(native);
    expect(records).toBe(coll.length);
    expect(collectives(sent)).toEqual([]);
    // The hook's side: the same events less the collectives, steps with their process id.
    expect(sent.map((e) => ({ ...e, pid: undefined }))).toEqual(
      native.filter((e) => e.kind !== 'collective').map((e) => ({ ...e, pid: undefined })),
    );
    for (const e of sent) expect(validateEvent(e).ok).toBe(true);
    const pidOf = new Map<number, { host: string; pid: number }>();
    for (const s of stepsOf(sent)) {
      expect(s.pid).toBeGreaterThan(1);
      const was = pidOf.get(s.rank);
      if (was) expect(was).toEqual({ host: s.host, pid: s.pid });
      pidOf.set(s.rank, { host: s.host, pid: s.pid! });
    }
    expect(files.size).toBe(64);
    for (const [rank, { host, pid }] of pidOf) {
      const ops = files.get(`${host}-pid${pid}.log`)!;
      const mine = coll.filter((e) => e.rank === rank);
      expect(ops).toHaveLength(mine.length);
      // In the order the rank ran them, each the simulated one: op, bytes, time to the microsecond.
      expect(ops.map((o) => [o.host, o.pid, o.op, o.bytes, o.execUs])).toEqual(
        mine.map((e) => [host, pid, e.op, e.bytes, Math.round(e.dur_ms * 1000)]),
      );
      for (const [i, o] of ops.entries()) {
        // Dumped at most one dump interval (500 µs) after the operation ended.
        expect(o.tMs).toBeGreaterThanOrEqual(mine[i].ts);
        expect(o.tMs).toBeLessThanOrEqual(mine[i].ts + 0.5);
        // The plugin's bus bandwidth: bytes over time, times 2(n-1)/n for an all-reduce.
        const factor = o.op === 'allreduce' ? (2 * (o.nranks - 1)) / o.nranks : 1;
        expect(o.busbwGbs).toBeCloseTo((o.bytes / o.execUs / 1e3) * factor, 5);
      }
    }
    // A communicator has one hash on all its ranks, each with its own rank in it; p2p pairs are
    // two-rank communicators whose peer is the other end. Sequence numbers count 1, 2, 3… per
    // communicator rank and op, one per step here.
    const all = [...files.values()].flat();
    const byComm = groupBy(all, (o) => o.comm);
    for (const ops of byComm.values()) {
      const n = ops[0].nranks;
      expect(new Set(ops.map((o) => o.nranks))).toEqual(new Set([n]));
      expect(new Set(ops.map((o) => o.commRank)).size).toBe(n);
      for (const o of ops) if (o.peer !== undefined) expect(o.peer).toBe(1 - o.commRank);
      for (const mine of groupBy(ops, (o) => `${o.commRank}/${o.op}`).values())
        expect(mine.map((o) => o.seq)).toEqual(mine.map((_, i) => i + 1));
    }
    // dp 2 × tp 8 × pp 4 = 32 data-parallel groups, 8 tensor-parallel ones per stage and replica (8),
    // 48 pipeline pairs.
    expect(byComm.size).toBe(32 + 8 + 48);
  });

  it('writes nothing for a rank once it emits no collective (a hang), and keeps the others going', () => {
    const hung = (e: RankwatchEvent) => !(e.kind === 'collective' && e.rank === 13 && e.step >= 3);
    const { sent, files } = write({ ranks: 64, steps: 8, seed: 4, telemetry: false }, {}, hung);
    const pid = stepsOf(sent).find((s) => s.rank === 13)!.pid;
    const host = stepsOf(sent).find((s) => s.rank === 13)!.host;
    const stuck = files.get(`${host}-pid${pid}.log`)!;
    expect(Math.max(...stuck.map((o) => o.seq))).toBe(3);
    const peer = stepsOf(sent).find((s) => s.rank === 12)!;
    const going = files.get(`${peer.host}-pid${peer.pid}.log`)!;
    expect(Math.max(...going.map((o) => o.seq))).toBe(8);
  });

  it('splits a collective into operations that add up to it, dated by their dump or, verbose, by their kernel', () => {
    const opts = { ranks: 16, steps: 4, seed: 5, telemetry: false };
    const plain = write(opts, { opsPerCollective: 4, dumpIntervalUs: 100_000 });
    const verbose = write(opts, { opsPerCollective: 4, dumpIntervalUs: 100_000, verbose: true });
    const coll = collectives(plain.native);
    expect(plain.records).toBe(4 * coll.length);
    const steps = stepsOf(plain.sent);
    for (const s of steps.filter((x) => x.rank === 5)) {
      const e = coll.filter((c) => c.rank === 5 && c.step === s.step);
      for (const [run, late] of [
        [plain, 100],
        [verbose, 0],
      ] as const) {
        const ops = run.files.get(`${s.host}-pid${s.pid}.log`)!.filter((o) => o.tMs <= s.ts + late);
        const inStep = ops.filter((o) => o.tMs > s.ts - s.step_ms);
        // Every simulated collective of the step, as four operations adding up to it (the last four:
        // the step before's last one may be dumped after that step ended).
        for (const c of e) {
          const mine = inStep
            .filter((o) => o.op === c.op && (o.peer !== undefined || o.commName === c.comm))
            .slice(-4);
          expect(mine).toHaveLength(4);
          expect(mine.reduce((a, o) => a + o.bytes, 0)).toBe(c.bytes);
          expect(mine.reduce((a, o) => a + o.execUs, 0)).toBe(Math.round(c.dur_ms * 1000));
          if (late === 0) expect(mine.at(-1)!.tMs).toBe(c.ts); // the kernel's stop, exactly
        }
      }
    }
  });

  it('gives a restarted job new processes: new pids and files, new communicators, sequence numbers from 1', () => {
    const { sent, files } = write({ ranks: 16, steps: 10, seed: 6, telemetry: false, restartAt: 5 });
    const steps = stepsOf(sent).filter((s) => s.rank === 3);
    const before = steps.find((s) => s.step === 4)!;
    const after = steps.find((s) => s.step === 5)!;
    expect(after.pid).not.toBe(before.pid);
    const a = files.get(`${before.host}-pid${before.pid}.log`)!;
    const b = files.get(`${after.host}-pid${after.pid}.log`)!;
    expect(a.length).toBeGreaterThan(0);
    expect(b.length).toBeGreaterThan(0);
    const old = new Set(a.map((o) => o.comm));
    expect(b.filter((o) => old.has(o.comm))).toEqual([]);
    expect(Math.min(...b.map((o) => o.seq))).toBe(1);
  });
});
