/**
 * A job whose GPU model or dtype has no known peak must not stop the runner: MFU is skipped
 * (no points, no mfu_drop), everything else is judged as usual.
 */
import { describe, expect, it } from 'vitest';
import type { RankwatchEvent } from '../schema/events.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { scoreRun } from '../sim/score.js';
import { DetectorRunner } from './runner.js';

function simEvents(over: { gpu_model?: string; dtype?: string }) {
  const sim = new ClusterSim({
    job: 'j-unknown-gpu',
    ranks: 64,
    steps: 120,
    seed: 7,
    faults: ['slow_rank:rank=20,at=30,slowdown=0.3', 'xid:rank=13,at=40,code=79'].map(parseFault),
  });
  let jobs = 0;
  const events = [...sim.events()].map((e): RankwatchEvent => {
    if (e.kind !== 'job') return e;
    jobs++;
    return { ...e, ...over };
  });
  expect(jobs).toBe(1);
  return { sim, events };
}

function run(events: RankwatchEvent[]) {
  const runner = new DetectorRunner();
  for (const e of events) runner.push(e);
  runner.flush();
  return { runner, out: runner.take() };
}

describe('DetectorRunner with a GPU it has no peak for', () => {
  it('control: the same job on a known GPU gives MFU points', () => {
    const { events } = simEvents({});
    const { runner, out } = run(events);
    expect(out.mfu.length).toBeGreaterThan(50);
    expect(out.findings.filter((f) => f.type === 'mfu_implausible' || f.type === 'mfu_unavailable')).toEqual(
      [],
    );
    expect(out.mfu.filter((p) => p.implausible)).toEqual([]);
    expect(runner.jobMfu('j-unknown-gpu')).toBeGreaterThan(0);
  });

  for (const [label, over] of [
    ['unknown gpu_model', { gpu_model: 'RTX-9999' }],
    ['unknown dtype', { dtype: 'int3' }],
    ['dtype the GPU lacks', { gpu_model: 'A100', dtype: 'fp8' }],
  ] as const) {
    it(`${label}: no MFU points, no throw, and the other detectors still find their faults`, () => {
      const { sim, events } = simEvents(over);
      const runner = new DetectorRunner();
      expect(() => {
        for (const e of events) runner.push(e);
        runner.flush();
      }).not.toThrow();
      const out = runner.take();
      expect(out.mfu).toEqual([]);
      expect(out.findings.filter((f) => f.type === 'mfu_drop')).toEqual([]);
      expect(runner.jobMfu('j-unknown-gpu')).toBeUndefined();
      // Said once, with the field to set, instead of MFU silently vanishing.
      const notes = out.findings.filter((f) => f.type === 'mfu_unavailable' && f.state === 'open');
      expect(notes).toHaveLength(1);
      expect(notes[0].summary).toMatch(/`(gpu_model|dtype)`/);
      expect(notes[0].summary).toMatch(/--list-gpus/);
      // Step rollups still come out, and the straggler and the XID are still found on their GPUs.
      expect(out.rollups.length).toBeGreaterThan(50);
      const score = scoreRun(out.findings, sim.faults);
      expect(score.faults.map((f) => [f.fault.spec.type, f.detected, f.first?.type])).toEqual([
        ['slow_rank', true, 'straggler'],
        ['xid', true, 'xid'],
      ]);
      expect(score.faults[1].first!.action).toBe('drain');
    });
  }
});
