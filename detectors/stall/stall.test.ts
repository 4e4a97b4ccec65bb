import { describe, expect, it } from 'vitest';
import { Random } from '../../core/random.js';
import type { RankwatchEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { ClusterSim, type SimOptions } from '../../sim/cluster.js';
import { parseFault } from '../../sim/faults.js';
import { DetectorRunner } from '../runner.js';

function run(events: Iterable<RankwatchEvent>): Finding[] {
  const runner = new DetectorRunner();
  for (const e of events) runner.push(e);
  runner.flush();
  return runner.take().findings;
}

const stalls = (fs: Finding[]) => fs.filter((f) => f.type === 'recurring_stall');

function simulate(o: SimOptions & { fault?: string[] }): Finding[] {
  return run(new ClusterSim({ telemetry: false, ...o, faults: (o.fault ?? []).map(parseFault) }).events());
}

/**
 * A 64-rank data-parallel job whose training loop times its step without the data loader: rank
 * `culprit` waits `stallMs` for its next batch every `every` steps outside its timed step, so its
 * own step looks normal and its peers wait for it in their collectives.
 */
function* loaderOutsideStep(culprit: number, every: number, stallMs: number, steps: number) {
  const rng = new Random(7);
  const ranks = 64;
  let ts = Date.UTC(2026, 0, 1);
  yield {
    v: 1,
    kind: 'job',
    ts,
    job: 'j',
    world_size: ranks,
    gpu_model: 'H100-SXM',
    dtype: 'bf16',
    parallel: { tp: 1, pp: 1, dp: ranks },
    flops_per_step: 1e15,
    global_batch_tokens: 1 << 20,
  } satisfies RankwatchEvent;
  for (let step = 0; step < steps; step++) {
    const stalled = step >= 20 && (step - 20) % every === 0 ? stallMs : 0;
    const compute = Array.from({ length: ranks }, () => 900 * Math.exp(0.015 * rng.normal()));
    const slowest = Math.max(...compute);
    const stepMs = slowest + 80 + stalled;
    ts += Math.round(stepMs);
    for (let r = 0; r < ranks; r++) {
      // The culprit's timed step is its own compute and comm; its peers also wait out its stall.
      const wait = r === culprit ? slowest - compute[r] + 80 : stepMs - compute[r];
      yield {
        v: 1,
        kind: 'step',
        ts,
        job: 'j',
        rank: r,
        host: `h${r >> 3}`,
        gpu: r & 7,
        step,
        step_ms: compute[r] + wait,
        compute_ms: compute[r],
        comm_wait_ms: wait,
      } satisfies RankwatchEvent;
    }
  }
}

describe('recurring stalls', () => {
  it('names a rank whose stalls show only as its peers waiting for it (a data loader outside its timed step)', () => {
    const found = stalls(run(loaderOutsideStep(37, 40, 4000, 260)));
    expect(found.filter((f) => f.state === 'open')).toHaveLength(1);
    const f = found[0];
    expect([f.rank, f.host, f.gpu, f.action]).toEqual([37, 'h4', 5, 'watch']);
    expect(f.evidence).toMatchObject({ seen_in: 'comm_wait', period_steps: 40, stalls: 5 });
    expect(f.evidence.stall_s as number).toBeCloseTo(4, 0);
    // 4 s in every 40 steps of ~1 s.
    expect(f.est_cost_pct as number).toBeGreaterThan(7);
    expect(f.est_cost_pct as number).toBeLessThan(11);
    expect(f.summary).toMatch(/^rank 37 on h4\/5 stalls 4(\.\d)? s .* every ~40 steps/);
  });

  it('stays open while the stalls go on, through one its own checkpoint hides, and resolves three periods after they stop', () => {
    // Rank 0 stalls 4 s every 40 steps from step 20 to 300; its checkpoint saves at 100, 200 and
    // 300 land on stalls, which they may explain: the run carries on through them.
    const fs = stalls(
      simulate({
        ranks: 64,
        steps: 480,
        seed: 5,
        fault: ['stall:rank=0,at=20,every=40,jitter=0,stall=4,until=300'],
      }),
    );
    expect(fs.map((f) => f.state).filter((s) => s !== 'update')).toEqual(['open', 'resolved']);
    const [open, resolved] = [fs[0], fs.at(-1)!];
    expect(open.evidence).toMatchObject({ first_stall_step: 20, period_steps: 40 });
    // Stalls at 20, 60, 140, 180, 220: the one at 100 is the checkpoint's.
    expect(open.evidence.last_stall_step).toBe(220);
    expect(resolved.evidence).toMatchObject({ resolved_reason: 'stalls_stopped', last_stall_step: 300 });
    expect(resolved.resolution).toMatch(/the recurring stall stopped/);
  });

  it('resolves a finding whose rank an elastic restart moved to another host, and finds its stalls there afresh', () => {
    const sim = new ClusterSim({
      ranks: 64,
      steps: 640,
      seed: 6,
      telemetry: false,
      restartAt: 330,
      renumber: true,
      faults: [parseFault('stall:rank=9,at=20,every=40,jitter=0,stall=4')],
    });
    const fs = stalls(run(sim.events()));
    const opens = fs.filter((f) => f.state === 'open');
    expect(opens).toHaveLength(2);
    const moved = fs.find((f) => f.state === 'resolved' && f.id === opens[0].id)!;
    expect(moved.evidence.resolved_reason).toBe('rank_moved');
    expect(moved.resolution).toContain(`rank 9 now runs on ${sim.places[9].host}`);
    expect(moved.ts).toBeLessThan(opens[1].ts);
    expect([opens[0].host, opens[1].host]).toEqual(['gpu-0001', sim.places[9].host]);
    expect(opens[1].rank).toBe(9);
  });

  it('says nothing when every rank stalls together, or a rank stalls on no steady period', () => {
    const shared = simulate({
      ranks: 128,
      steps: 360,
      seed: 8,
      sharedStalls: { every: 40, jitter: 4, stall: [3, 6] },
    });
    expect(stalls(shared)).toEqual([]);
    // 4 s stalls at irregular steps: no period holds for more than two of them.
    const irregular = [20, 35, 90, 100, 170, 200, 290, 310].map(
      (at) => `stall:rank=9,at=${at},stall=4,until=${at}`,
    );
    expect(stalls(simulate({ ranks: 64, steps: 360, seed: 8, fault: irregular }))).toEqual([]);
  });

  it("leaves a step where many ranks stall at once to the job: it is no rank's", () => {
    // 24 of 256 ranks (more than 2% and 16) stall 4 s together every 40 steps.
    const many = Array.from({ length: 24 }, (_, i) => `stall:rank=${i * 10},at=20,every=40,jitter=0,stall=4`);
    expect(stalls(simulate({ ranks: 256, steps: 300, seed: 3, collectives: false, fault: many }))).toEqual(
      [],
    );
  });

  it('makes one host-level finding when the ranks of one host stall together', () => {
    const host = Array.from({ length: 8 }, (_, g) => `stall:rank=${40 + g},at=20,every=45,jitter=0,stall=5`);
    const open = stalls(
      simulate({ ranks: 128, steps: 300, seed: 4, collectives: false, fault: host }),
    ).filter((f) => f.state === 'open');
    expect(open).toHaveLength(1);
    expect([open[0].host, open[0].gpu, open[0].rank]).toEqual(['gpu-0005', undefined, undefined]);
    expect(open[0].evidence.ranks).toEqual([40, 41, 42, 43, 44, 45, 46, 47]);
    expect(open[0].summary).toMatch(/^8 ranks on gpu-0005 stall/);
  });
});
