/**
 * Detector cases as data: each file in ./scenarios describes a simulated job (events in) and the
 * findings it must and must not produce (findings out). A new case is a new file.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ClusterSim, type SimOptions } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { scoreRun } from '../sim/score.js';
import { DetectorRunner } from './runner.js';

interface Scenario {
  description: string;
  sim: Omit<SimOptions, 'faults'> & { faults?: string[] };
  expect: {
    fault: number;
    types: string[];
    within_s: number;
    host_level?: boolean;
    action?: string;
    /** Largest |est_cost_pct - the simulator's true cost| allowed, in percentage points. */
    cost_within_pp?: number;
  }[];
  forbid: string[];
  max_open?: Record<string, number>;
}

const dir = join(import.meta.dirname, 'scenarios');
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort();

function runScenario(s: Scenario) {
  const sim = new ClusterSim({ ...s.sim, faults: (s.sim.faults ?? []).map(parseFault) });
  const runner = new DetectorRunner();
  for (const e of sim.events()) runner.push(e);
  runner.flush();
  const { findings, mfu } = runner.take();
  return { sim, findings, mfu, score: scoreRun(findings, sim.faults) };
}

describe('detector scenarios', () => {
  it('has scenario files', () => expect(files.length).toBeGreaterThan(5));
  it('has clean scenarios (no faults injected), each expecting nothing', () => {
    const clean = files
      .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')) as Scenario)
      .filter((s) => (s.sim.faults ?? []).length === 0);
    expect(clean.length).toBeGreaterThanOrEqual(3);
    for (const s of clean) expect(s.expect).toEqual([]);
  });
  for (const file of files) {
    const s = JSON.parse(readFileSync(join(dir, file), 'utf8')) as Scenario;
    it(`${file}: ${s.description}`, () => {
      const { sim, findings, mfu, score } = runScenario(s);
      if (sim.faults.length === 0) {
        // Nothing injected: no finding of any type (mfu_drop, xid, ecc included), in any state.
        expect(findings.map((f) => `${f.type}/${f.state}: ${f.summary}`)).toEqual([]);
        // ...and the MFU detector was armed (it had points to judge), so its silence means something.
        expect(mfu.length).toBeGreaterThan(0);
      } else {
        expect(s.expect.length, 'a scenario that injects faults must expect something').toBeGreaterThan(0);
      }
      for (const exp of s.expect) {
        const fs = score.faults[exp.fault];
        expect(fs.detected, `fault ${exp.fault} (${fs.fault.spec.type}) not detected`).toBe(true);
        expect(exp.types).toContain(fs.first!.type);
        expect(fs.first!.host).toBe(fs.fault.host);
        if (exp.host_level) expect(fs.first!.gpu).toBeUndefined();
        else if (fs.fault.gpu !== undefined) expect(fs.first!.gpu).toBe(fs.fault.gpu);
        expect(fs.ttdMs!).toBeGreaterThanOrEqual(0);
        expect(fs.ttdMs! / 1000).toBeLessThanOrEqual(exp.within_s);
        if (exp.action) expect(fs.first!.action).toBe(exp.action);
        if (exp.cost_within_pp !== undefined) {
          const est = fs.estCostPct!;
          expect(est).toBeGreaterThanOrEqual(0);
          expect(est).toBeLessThan(100);
          expect(
            Math.abs(est - fs.fault.trueCostPct),
            `est ${est} vs true ${fs.fault.trueCostPct}`,
          ).toBeLessThanOrEqual(exp.cost_within_pp);
        }
      }
      const falseOnes = score.falseFindings.filter((f) => s.forbid.includes(f.type));
      expect(falseOnes.map((f) => f.summary)).toEqual([]);
      for (const [type, max] of Object.entries(s.max_open ?? {})) {
        expect(findings.filter((f) => f.type === type && f.state === 'open').length).toBeLessThanOrEqual(max);
      }
    });
  }
});
