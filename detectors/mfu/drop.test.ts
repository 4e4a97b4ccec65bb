import { describe, expect, it } from 'vitest';
import type { Finding } from '../../schema/finding.js';
import { ClusterSim } from '../../sim/cluster.js';
import { parseFault } from '../../sim/faults.js';
import { DetectorRunner } from '../runner.js';

function run(faults: string[], seed = 31): Finding[] {
  const sim = new ClusterSim({ ranks: 256, steps: 240, seed, faults: faults.map(parseFault) });
  const r = new DetectorRunner();
  for (const e of sim.events()) r.push(e);
  r.flush();
  return r.take().findings;
}

describe('MFU drop', () => {
  it('opens when a degraded NIC costs the job ~18%, and names the slow link as the probable cause', () => {
    const fs = run(['nic:rank=100,at=80,factor=3']);
    const drop = fs.find((f) => f.type === 'mfu_drop' && f.state === 'open');
    const link = fs.find((f) => f.type === 'slow_link' && f.state === 'open');
    expect(drop).toBeDefined();
    expect(link).toBeDefined();
    const latest = fs.filter((f) => f.id === drop!.id).at(-1)!;
    expect(latest.related).toContain(link!.id);
    expect(latest.evidence.probable_cause).toBe(link!.id);
    expect(drop!.evidence.fall_pct as number).toBeGreaterThan(10);
  });

  it('stays silent for a small straggler, stalls and checkpoints', () => {
    expect(run(['slow_rank:rank=9,at=60,slowdown=0.05']).filter((f) => f.type === 'mfu_drop')).toEqual([]);
    expect(run([], 32).filter((f) => f.type === 'mfu_drop')).toEqual([]);
  });

  it('resolves when the cause goes away', () => {
    const fs = run(['nic:rank=100,at=60,until=120,factor=3'], 33);
    const states = fs.filter((f) => f.type === 'mfu_drop').map((f) => f.state);
    expect(states[0]).toBe('open');
    expect(states).toContain('resolved');
  });
});
