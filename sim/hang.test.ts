import { describe, expect, it } from 'vitest';
import type { FaultEvent, GpuEvent, RankwatchEvent, StepEvent } from '../schema/events.js';
import { ClusterSim } from './cluster.js';
import { parseFault } from './faults.js';

function run(fault: string, ranks = 64) {
  const sim = new ClusterSim({ ranks, steps: 40, seed: 4, job: 'j', faults: [parseFault(fault)] });
  const events = [...sim.events()];
  return { sim, events, truth: sim.faults[0] };
}

const steps = (es: RankwatchEvent[]) => es.filter((e): e is StepEvent => e.kind === 'step');
const timeouts = (es: RankwatchEvent[]) =>
  es.filter(
    (e): e is FaultEvent & Record<string, unknown> => e.kind === 'fault' && e.source === 'nccl_timeout',
  );

describe('simulated hangs', () => {
  it('at the top of a step: no rank completes it, the culprit idles, its peers spin, their watchdogs fire 600 s on', () => {
    const { events, truth } = run('hang:rank=21,at=20');
    expect(events.map((e) => e.ts)).toEqual([...events.map((e) => e.ts)].sort((a, b) => a - b));
    // Step 20 never completed (the job restarted and went on from step 21).
    expect(steps(events).filter((e) => e.step === 20)).toEqual([]);
    expect(steps(events).some((e) => e.step === 21)).toBe(true);
    const during = events.filter(
      (e): e is GpuEvent =>
        e.kind === 'gpu' && e.ts > truth.onsetTs! + 5_000 && e.ts < truth.onsetTs! + 500_000,
    );
    const culprit = during.filter((e) => e.rank === 21);
    const peers = during.filter((e) => e.rank !== 21);
    expect(culprit.length).toBeGreaterThan(400);
    expect(culprit.every((e) => e.util_pct === 0 && e.throttle_reasons === 1 && e.power_w! < 100)).toBe(true);
    expect(
      peers.every((e) => e.util_pct === 100 && e.power_w! < 250 && e.sm_clock_mhz === e.max_sm_clock_mhz),
    ).toBe(true);
    const t = timeouts(events);
    expect(t).toHaveLength(63);
    expect(new Set(t.map((e) => e.rank)).has(21)).toBe(false);
    for (const e of t) {
      expect(e.ran_ms).toBeGreaterThanOrEqual(600_000);
      expect(e.ts - truth.onsetTs!).toBeGreaterThan(600_000);
      expect(e.last_completed).toBe((e.seq as number) - 1);
    }
    // Within one process group every rank waits in the same collective: no desync to see.
    const byPg = new Map<string, Set<string>>();
    for (const e of t)
      byPg.set(e.pg as string, (byPg.get(e.pg as string) ?? new Set()).add(`${e.op} ${e.seq}`));
    expect([...byPg.values()].every((s) => s.size === 1)).toBe(true);
    const lifecycle = events.filter((e) => e.kind === 'job_event').map((e) => e.event);
    expect(lifecycle).toEqual(['start', 'interrupted', 'restart', 'finished']);
    expect(truth.trueCostPct).toBe(100);
  });

  it("right before its data-parallel all-reduce: the other groups complete the step, the culprit's group does not", () => {
    const { events, truth } = run('hang_allreduce:rank=21,at=20');
    // rank 21: stage 1, tensor-parallel index 5; its group is ranks 21 and 29 (dp 2).
    const step20 = new Set(
      steps(events)
        .filter((e) => e.step === 20)
        .map((e) => e.rank),
    );
    expect(step20.size).toBe(62);
    expect(step20.has(21) || step20.has(29)).toBe(false);
    const t = timeouts(events);
    expect(t.find((e) => e.rank === 29)).toMatchObject({ pg_name: 'dp.s1.t5', op: 'ALLREDUCE', seq: 21 });
    expect(truth.onsetTs).toBeGreaterThan(steps(events).find((e) => e.step === 19)!.ts);
  });

  it('a hang shorter than the watchdog: the culprit comes back, its step took that much longer, no timeout', () => {
    const { events } = run('hang:rank=21,at=20,for=45');
    expect(timeouts(events)).toEqual([]);
    const s20 = steps(events).filter((e) => e.step === 20);
    expect(s20).toHaveLength(64);
    const culprit = s20.find((e) => e.rank === 21)!;
    const peer = s20.find((e) => e.rank === 3)!;
    expect(culprit.step_ms).toBeGreaterThan(45_000);
    expect(culprit.compute_ms).toBeGreaterThan(45_000);
    expect(peer.comm_wait_ms).toBeGreaterThan(45_000);
  });

  it('collectives carry their sequence numbers; hang_allreduce needs data parallelism', () => {
    const { events } = run('hang:rank=1,at=5,for=10', 16);
    const c = events.find((e) => e.kind === 'collective' && e.step === 3);
    expect(c).toMatchObject({ seq: 4 });
    expect(() => run('hang_allreduce:rank=3,at=2', 8)).toThrow(/needs data parallelism/);
  });
});
