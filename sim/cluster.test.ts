import { describe, expect, it } from 'vitest';
import type { StepEvent } from '../schema/events.js';
import { validateEvent } from '../schema/validate.js';
import { ClusterSim } from './cluster.js';
import { parseFault } from './faults.js';
import { place } from './topology.js';

const steps = (sim: ClusterSim) => [...sim.events()].filter((e): e is StepEvent => e.kind === 'step');

describe('cluster simulator', () => {
  it('lays ranks out in Megatron order: tp fastest, then dp, then pp; 8 GPUs per host', () => {
    const l = { tp: 4, dp: 2, pp: 2, gpusPerHost: 8 };
    expect(place(0, l)).toMatchObject({ tp: 0, dp: 0, stage: 0, host: 'gpu-0000', gpu: 0 });
    expect(place(5, l)).toMatchObject({ tp: 1, dp: 1, stage: 0, host: 'gpu-0000', gpu: 5 });
    expect(place(9, l)).toMatchObject({ tp: 1, dp: 0, stage: 1, host: 'gpu-0001', gpu: 1 });
  });

  it('is deterministic for a seed, and every event meets the v1 contract', () => {
    const a = [...new ClusterSim({ ranks: 16, steps: 20, seed: 3 }).events()];
    const b = [...new ClusterSim({ ranks: 16, steps: 20, seed: 3 }).events()];
    const c = [...new ClusterSim({ ranks: 16, steps: 20, seed: 4 }).events()];
    expect(JSON.stringify(a)).toBe(JSON.stringify(b));
    expect(JSON.stringify(a)).not.toBe(JSON.stringify(c));
    for (const e of a) expect(validateEvent(e).ok).toBe(true);
  });

  it('synchronises ranks: the same step_ms for all; the slow rank has high compute and low comm wait', () => {
    const sim = new ClusterSim({
      ranks: 64,
      steps: 30,
      faults: [parseFault('slow_rank:rank=9,at=10,slowdown=0.3')],
    });
    const s = steps(sim).filter((e) => e.step === 20);
    expect(new Set(s.map((e) => e.step_ms)).size).toBe(1);
    const slow = s.find((e) => e.rank === 9)!;
    const peers = s.filter((e) => e.stage === slow.stage && e.rank !== 9);
    expect(slow.compute_ms).toBeGreaterThan(Math.max(...peers.map((e) => e.compute_ms)));
    expect(slow.comm_wait_ms!).toBeLessThan(Math.min(...peers.map((e) => e.comm_wait_ms!)));
  });

  it('makes the first and last pipeline stages costlier', () => {
    const s = steps(new ClusterSim({ ranks: 256, steps: 5, spikeProb: 0 }));
    const mean = (stage: number) => {
      const xs = s.filter((e) => e.stage === stage).map((e) => e.compute_ms);
      return xs.reduce((a, b) => a + b, 0) / xs.length;
    };
    expect(mean(0)).toBeGreaterThan(mean(1) * 1.03);
    expect(mean(3)).toBeGreaterThan(mean(0));
  });

  it('adding a fault changes no other rank', () => {
    const clean = steps(new ClusterSim({ ranks: 64, steps: 10, telemetry: false, collectives: false }));
    const faulty = steps(
      new ClusterSim({
        ranks: 64,
        steps: 10,
        telemetry: false,
        collectives: false,
        faults: [parseFault('slow_rank:rank=20,at=0')],
      }),
    );
    expect(clean.length).toBe(64 * 10);
    expect(faulty.length).toBe(clean.length);
    let others = 0;
    let faulted = 0;
    for (let i = 0; i < clean.length; i++) {
      expect([faulty[i].rank, faulty[i].step]).toEqual([clean[i].rank, clean[i].step]);
      if (clean[i].rank !== 20) {
        expect(faulty[i].compute_ms).toBe(clean[i].compute_ms);
        others++;
      } else {
        // The faulted rank really is slower, every step from onset (at=0).
        expect(faulty[i].compute_ms).toBeGreaterThan(clean[i].compute_ms);
        faulted++;
      }
    }
    expect(others).toBe(63 * 10);
    expect(faulted).toBe(10);
  });

  it('a stall fault holds its rank up for its length at its planned steps only, every ± jitter steps apart', () => {
    const opts = { ranks: 64, steps: 300, seed: 2, telemetry: false, collectives: false, spikeProb: 0 };
    const clean = steps(new ClusterSim(opts));
    const sim = new ClusterSim({
      ...opts,
      faults: [parseFault('stall:rank=20,at=30,every=50,jitter=5,stall=3-6')],
    });
    const faulty = steps(sim);
    const stalled: number[] = [];
    for (let i = 0; i < clean.length; i++) {
      const extra = faulty[i].compute_ms - clean[i].compute_ms;
      if (clean[i].rank !== 20) expect(extra).toBe(0);
      else if (extra > 0) {
        expect(extra).toBeGreaterThanOrEqual(3000 - 0.01);
        expect(extra).toBeLessThanOrEqual(6000 + 0.01);
        stalled.push(clean[i].step);
      }
    }
    expect(stalled[0]).toBe(30);
    expect(stalled.length).toBeGreaterThanOrEqual(5);
    for (let i = 1; i < stalled.length; i++) {
      expect(stalled[i] - stalled[i - 1]).toBeGreaterThanOrEqual(45);
      expect(stalled[i] - stalled[i - 1]).toBeLessThanOrEqual(55);
    }
    // Every step waits for it: ~4.5 s in every ~50 steps of ~1.2 s.
    expect(sim.faults[0].trueCostPct).toBeGreaterThan(4);
    expect(sim.faults[0].trueCostPct).toBeLessThan(9);
  });

  it('shared stalls hold every rank up together', () => {
    const sim = new ClusterSim({
      ranks: 64,
      steps: 120,
      seed: 2,
      telemetry: false,
      collectives: false,
      spikeProb: 0,
      sharedStalls: { every: 40, stall: [4, 4], at: 10 },
    });
    const byStep = new Map<number, number[]>();
    for (const e of steps(sim)) byStep.set(e.step, [...(byStep.get(e.step) ?? []), e.compute_ms]);
    for (const [step, compute] of byStep) {
      const held = (step - 10) % 40 === 0 && step >= 10;
      for (const c of compute) {
        if (held) expect(c).toBeGreaterThan(4000);
        else expect(c).toBeLessThan(1500);
      }
    }
  });

  it('keeps single-rank spikes per job-step fixed, so a 16k-rank job runs the steps a 256-rank job does', () => {
    const median = (ranks: number) => {
      const sim = new ClusterSim({ ranks, steps: 60, seed: 3, telemetry: false, collectives: false });
      const ms = [...sim.events()].flatMap((e) => (e.kind === 'step' && e.rank === 0 ? [e.step_ms] : []));
      return ms.sort((a, b) => a - b)[ms.length >> 1];
    };
    const small = median(256);
    expect(small).toBeGreaterThan(1100);
    expect(small).toBeLessThan(1300);
    // At a fixed per-rank rate (0.03%), some rank of 16k spikes 1.5-3x on most steps: ~2.9 s.
    expect(median(16384)).toBeLessThan(small * 1.06);
    const perRank = new ClusterSim({
      ranks: 16384,
      steps: 20,
      seed: 3,
      spikeProb: 0.0003,
      telemetry: false,
      collectives: false,
    });
    const slow = [...perRank.events()].flatMap((e) => (e.kind === 'step' && e.rank === 0 ? [e.step_ms] : []));
    expect(slow.sort((a, b) => a - b)[10]).toBeGreaterThan(small * 1.5);
  });

  it('samples GPU telemetry at the interval asked for', () => {
    const gpuTs = (telemetryEveryMs?: number) =>
      [...new ClusterSim({ ranks: 8, steps: 60, collectives: false, telemetryEveryMs }).events()]
        .filter((e) => e.kind === 'gpu' && e.gpu === 0)
        .map((e) => e.ts);
    const every1 = gpuTs();
    const every10 = gpuTs(10_000);
    expect(every1.length).toBeGreaterThan(60);
    expect(every10.length).toBeGreaterThan(4);
    expect(every10.length).toBeLessThan(every1.length / 8);
    for (const ts of every10) expect(ts % 10_000).toBe(0);
  });

  it('throttle and power brake show in telemetry; degraded NIC slows its collectives', () => {
    const sim = new ClusterSim({
      ranks: 64,
      steps: 30,
      faults: ['throttle:rank=3,at=5', 'power_brake:host=5,at=5', 'nic:rank=17,at=5,factor=4'].map(
        parseFault,
      ),
    });
    const events = [...sim.events()];
    const late = events.filter((e) => e.ts > sim.faults[0].onsetTs! + 2000);
    const gpu = late.filter((e) => e.kind === 'gpu');
    const throttled = gpu.filter((e) => e.host === 'gpu-0000' && e.gpu === 3 && e.throttle_reasons & 0x40);
    expect(throttled.length).toBeGreaterThan(10);
    const braked = gpu.filter((e) => e.host === 'gpu-0005' && e.throttle_reasons & 0x80);
    expect(new Set(braked.map((e) => (e.kind === 'gpu' ? e.gpu : -1))).size).toBe(8);
    const ar = late.filter((e) => e.kind === 'collective' && e.op === 'allreduce');
    const slowComm = ar.find((e) => e.kind === 'collective' && e.rank === 17);
    const otherComm = ar.find((e) => e.kind === 'collective' && e.rank === 18);
    expect(slowComm && otherComm && slowComm.kind === 'collective' && otherComm.kind === 'collective').toBe(
      true,
    );
    if (slowComm?.kind === 'collective' && otherComm?.kind === 'collective')
      expect(slowComm.dur_ms).toBeGreaterThan(otherComm.dur_ms * 2);
    expect(sim.faults.map((f) => [f.host, f.gpu])).toEqual([
      ['gpu-0000', 3],
      ['gpu-0005', undefined],
      ['gpu-0002', 1],
    ]);
  });
});
