/**
 * Detector state per rank is bounded and independent of job length: a long job must not grow
 * the heap. Measured with a forced GC between two points of one long run.
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { describe, expect, it } from 'vitest';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { DetectorRunner } from './runner.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

function heapAfterGc(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

describe('bounded detector memory', () => {
  it('does not grow with job length (64 ranks, 12,000 steps)', () => {
    const sim = new ClusterSim({
      ranks: 64,
      steps: 12_000,
      telemetry: true,
      faults: [parseFault('intermittent:rank=9,at=100'), parseFault('nic:rank=40,at=200,factor=2')],
      checkpointEvery: 0,
    });
    const runner = new DetectorRunner();
    let early = 0;
    let steps = 0;
    let findings = 0;
    for (const e of sim.events()) {
      runner.push(e);
      if (e.kind === 'step' && e.rank === 63) {
        steps++;
        if (steps % 500 === 0) findings += runner.take().findings.length; // the pipeline drains output continuously
        if (steps === 2_000) early = heapAfterGc();
      }
    }
    findings += runner.take().findings.length;
    const late = heapAfterGc();
    // 10,000 more steps (2.6M events) may not add more than 2 MB of retained state.
    expect(late - early).toBeLessThan(2 * 1024 * 1024);
    expect(findings).toBeGreaterThan(0); // the detectors were busy, not idle
  });
});
