/**
 * The Inspector path of the evaluation: a job's collectives written as NCCL Inspector dump files,
 * read back by the collector's Inspector intake with the hook's step events on the job's clock,
 * judged by the detectors, against the same job's own events.
 */
import { describe, expect, it } from 'vitest';
import { parseFault } from '../sim/faults.js';
import { runCase } from './evaluate.js';
import { emptyStats, type InspectorPathOptions, throughInspector } from './inspector.js';
import type { EvalCase } from './matrix.js';
import { agreement } from './paths.js';

function both(c: EvalCase, o: InspectorPathOptions = {}) {
  const stats = emptyStats();
  const native = runCase(c);
  const inspector = runCase(c, {}, (sim) => throughInspector(sim, o, stats));
  return { native, inspector, stats, agreed: agreement([{ native, inspector, stats }])[0] };
}

const job = (family: string, faults: string[], seed: number): EvalCase => ({
  family,
  ranks: 64,
  seed,
  sim: { ranks: 64, steps: 70, seed, telemetry: false, faults: faults.map(parseFault) },
});

describe('eval --path inspector', () => {
  it('finds the degraded NIC on the same host and GPU as the native path, as soon', () => {
    const { native, inspector, stats, agreed } = both(job('nic', ['nic:rank=37,at=20,factor=3'], 2));
    expect(native.detected).toBe(true);
    expect(inspector.detected).toBe(true);
    expect(inspector.opened?.map((f) => [f.type, f.host, f.gpu])).toEqual(
      native.opened?.map((f) => [f.type, f.host, f.gpu]),
    );
    expect(Math.abs(inspector.ttdSteps! - native.ttdSteps!)).toBeLessThanOrEqual(1);
    expect(agreed).toMatchObject({ runs: 1, sameFindings: 1, withinStep: 1, differences: [] });
    // Every record the files held was mapped to its rank and step: one event each (one operation
    // per collective), nothing dropped, nothing unreadable.
    expect(stats.records).toBeGreaterThan(0);
    expect(stats.reduced).toBe(stats.records);
    expect(stats.dropped).toEqual({});
    expect(stats.parseErrors).toBe(0);
  }, 60_000);

  it('reduces several operations per collective to one event, dated by their kernels, and finds the bad pair link', () => {
    // Rank 3 (gpu-0000) and its next pipeline stage, rank 19 (gpu-0002).
    const c = job('link', ['link:rank=3,peer=19,at=20,factor=4'], 3);
    // Dumps every 100 ms, verbose: each operation dated by its kernel's stop, so in its own step.
    const { native, inspector, stats } = both(c, {
      opsPerCollective: 3,
      dumpIntervalUs: 100_000,
      verbose: true,
    });
    expect(stats.reduced * 3).toBe(stats.records);
    expect(stats.dropped).toEqual({});
    expect(native.detected).toBe(true);
    expect(inspector.detected).toBe(true);
    const link = (r: typeof native) =>
      r.opened?.filter((f) => f.type === 'slow_link').map((f) => [f.host, f.peer_host].sort());
    expect(link(native)).toEqual([['gpu-0000', 'gpu-0002']]);
    expect(link(inspector)).toEqual(link(native));
    expect(Math.abs(inspector.ttdSteps! - native.ttdSteps!)).toBeLessThanOrEqual(1);
  }, 60_000);

  it('opens nothing on a clean job', () => {
    const { native, inspector, stats } = both(job('clean', [], 4));
    expect(native.opened).toEqual([]);
    expect(inspector.opened).toEqual([]);
    expect(stats.reduced).toBe(stats.records);
  }, 60_000);
});
