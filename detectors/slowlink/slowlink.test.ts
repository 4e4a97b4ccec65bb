import { describe, expect, it } from 'vitest';
import type { Finding } from '../../schema/finding.js';
import { ClusterSim, type SimOptions } from '../../sim/cluster.js';
import { parseFault } from '../../sim/faults.js';
import { DetectorRunner } from '../runner.js';

function run(opts: SimOptions) {
  const sim = new ClusterSim(opts);
  const runner = new DetectorRunner();
  const stepTs = new Map<number, number>();
  for (const e of sim.events()) {
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
