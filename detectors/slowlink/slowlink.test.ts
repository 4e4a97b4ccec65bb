import { describe, expect, it } from 'vitest';
import type { CollectiveEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { ClusterSim, type SimOptions } from '../../sim/cluster.js';
import { parseFault } from '../../sim/faults.js';
import { DetectorRunner } from '../runner.js';

function run(opts: SimOptions, rename?: (comm: string, step: number) => string) {
  const sim = new ClusterSim(opts);
  const runner = new DetectorRunner();
  const stepTs = new Map<number, number>();
  for (const e of sim.events()) {
    if (rename && e.kind === 'collective') e.comm = rename(e.comm, e.step);
    runner.push(e);
    if (e.kind === 'step' && e.rank === 0) stepTs.set(e.step, e.ts);
  }
  runner.flush();
  const links = runner.take().findings.filter((f: Finding) => f.type === 'slow_link');
  return { sim, links, stepTs };
}

describe('slow link: flapping rails', () => {
  it('stays open while the rail flaps, and resolves only after sustained health', () => {
    // Rank 50 of a 128-rank job: gpu-0006/2. Slow on one step in ten, steps 30..330.
    const { links, stepTs } = run({
      ranks: 128,
      steps: 480,
      seed: 7,
      faults: [parseFault('flap:rank=50,at=30,until=330,every=10,factor=3')],
    });
    const opened = links.filter((f) => f.state === 'open');
    expect(opened.map((f) => `${f.host}/${f.gpu} ${f.peer_host ?? ''}`)).toEqual(['gpu-0006/2 ']);
    expect(opened[0].ts).toBeLessThan(stepTs.get(60)!);
    expect(opened[0].evidence.flapping).toBe(true);
    const resolved = links.filter((f) => f.state === 'resolved');
    expect(resolved).toHaveLength(1);
    // Not while it flapped, and not at the job's end either: after a quiet spell past the last slow step.
    expect(resolved[0].ts).toBeGreaterThanOrEqual(stepTs.get(330 + 50)!);
    expect(resolved[0].evidence.resolved_reason).toBeUndefined();
  });

  it('a steady degraded NIC opens within a few steps and resolves once repaired', () => {
    const { links, stepTs } = run({
      ranks: 128,
      steps: 240,
      seed: 8,
      faults: [parseFault('nic:rank=77,at=40,until=120,factor=3')],
    });
    const opened = links.filter((f) => f.state === 'open');
    expect(opened.map((f) => `${f.host}/${f.gpu}`)).toEqual(['gpu-0009/5']);
    expect(opened[0].ts).toBeLessThanOrEqual(stepTs.get(44)!);
    expect(opened[0].evidence.flapping).toBe(false);
    const resolved = links.filter((f) => f.state === 'resolved');
    expect(resolved).toHaveLength(1);
    expect(resolved[0].ts).toBeLessThan(stepTs.get(200)!);
  });
});

describe('slow link: communicators', () => {
  it('finds the same links when every step renames its communicators (ids dropped and given again)', () => {
    const opts = {
      ranks: 128,
      steps: 240,
      seed: 8,
      faults: [parseFault('nic:rank=77,at=40,until=120,factor=3')],
    };
    const plain = run(opts).links;
    // New names every step, as if each step were a new NCCL communicator: the detector's ids for
    // them outgrow a step's links within ~50 steps, are dropped, and steps still open get new ones.
    const renamed = run(opts, (comm, step) => `${comm}#${step}`).links;
    const brief = (f: Finding) => [f.state, f.host, f.gpu, f.ts, f.severity];
    expect(plain.length).toBeGreaterThan(0);
    expect(renamed.map(brief)).toEqual(plain.map(brief));
  });
});

describe('slow link: NVLink groups', () => {
  it('names the host a tensor-parallel group runs on now, after a restart moved it under the same communicator names', () => {
    // Rank 77's host (gpu-0009) is replaced by a spare at step 100; its NVLink degrades at step 140.
    const sim = new ClusterSim({
      ranks: 128,
      steps: 240,
      seed: 3,
      faults: [parseFault('nvlink:rank=77,at=140')],
    });
    const runner = new DetectorRunner();
    for (const e of sim.events()) {
      const ev = e as { step?: number; host?: string; peer_host?: string };
      if (ev.step !== undefined && ev.step >= 100) {
        if (ev.host === 'gpu-0009') ev.host = 'gpu-spare';
        if (ev.peer_host === 'gpu-0009') ev.peer_host = 'gpu-spare';
      }
      runner.push(e);
    }
    runner.flush();
    const opened = runner
      .take()
      .findings.filter((f: Finding) => f.type === 'slow_link' && f.state === 'open');
    expect(opened.map((f) => f.host)).toEqual(['gpu-spare']);
    expect(opened[0].summary).toContain('GPUs 0, 1, 2, 3, 4, 5, 6, 7 on gpu-spare');
  });
});

describe('slow link: collectives from node collectors', () => {
  /**
   * As node collectors send them: each host's reduced collectives a few steps after the step
   * events (settle time, dump lag), each collector on its own clock, so one step's collectives
   * come in parts with step frames closing in between.
   */
  function staggered(opts: SimOptions) {
    const runner = new DetectorRunner();
    const held: { due: number; e: CollectiveEvent }[] = [];
    let frame = -1;
    for (const e of new ClusterSim(opts).events()) {
      if (e.kind === 'collective') {
        // Two frames late, a third of the ranks three (their dump came after the collector's poll).
        held.push({ due: e.step + 2 + (e.rank % 3 === 0 ? 1 : 0), e });
        continue;
      }
      if (e.kind === 'step' && e.step > frame) {
        frame = e.step;
        for (const h of held.filter((x) => x.due <= frame)) runner.push(h.e);
        held.splice(0, held.length, ...held.filter((x) => x.due > frame));
      }
      runner.push(e);
    }
    for (const h of held) runner.push(h.e);
    runner.flush();
    return runner.take().findings.filter((f: Finding) => f.type === 'slow_link' && f.state === 'open');
  }

  it('judges a step once all its parts came: no false slow link with late-arrival timing, and the NIC still found', () => {
    // Late arrival: each rank's time includes waiting for the last member; a communicator judged
    // without the member that came last would look slow.
    const clean = staggered({ ranks: 128, steps: 120, seed: 11, lateArrival: true });
    expect(clean.map((f) => `${f.host}/${f.gpu}`)).toEqual([]);
    const nic = staggered({
      ranks: 128,
      steps: 120,
      seed: 12,
      lateArrival: true,
      faults: [parseFault('nic:rank=77,at=40,factor=3')],
    });
    expect(nic.map((f) => `${f.host}/${f.gpu}`)).toEqual(['gpu-0009/5']);
  });
});
