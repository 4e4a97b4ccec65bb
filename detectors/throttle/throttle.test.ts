import { describe, expect, it } from 'vitest';
import type { GpuEvent, RankwatchEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { DetectorRunner } from '../runner.js';

const MAX = 1980;
function sample(ts: number, host: string, gpu: number, over: Partial<GpuEvent> = {}): GpuEvent {
  return {
    v: 1,
    kind: 'gpu',
    ts,
    host,
    gpu,
    job: 'j',
    sm_clock_mhz: MAX,
    max_sm_clock_mhz: MAX,
    util_pct: 98,
    throttle_reasons: 0,
    ...over,
  };
}

function run(events: RankwatchEvent[]): Finding[] {
  const r = new DetectorRunner();
  for (const e of events) r.push(e);
  r.flush();
  return r.take().findings;
}

/** `seconds` of 8 GPUs on one host; `shape` says what GPU g reports at second s. */
function host(shape: (s: number, g: number) => Partial<GpuEvent>, seconds = 60): GpuEvent[] {
  const out: GpuEvent[] = [];
  for (let s = 0; s < seconds; s++)
    for (let g = 0; g < 8; g++) out.push(sample(s * 1000, 'gpu-0001', g, shape(s, g)));
  return out;
}

describe('throttle detector', () => {
  it('fires on sustained thermal throttling while busy, naming the GPU', () => {
    const fs = run(
      host((s, g) => (g === 3 && s >= 10 ? { sm_clock_mhz: 1500, throttle_reasons: 0x40 } : {})),
    );
    const open = fs.filter((f) => f.state === 'open');
    expect(open).toHaveLength(1);
    expect(open[0]).toMatchObject({ type: 'throttle', host: 'gpu-0001', gpu: 3, action: 'cordon' });
    expect(open[0].ts).toBeLessThan(20_000);
    expect(open[0].evidence.reasons).toEqual(['hw_thermal_slowdown']);
  });

  it('ignores single samples, idle GPUs, and the software power cap alone', () => {
    expect(
      run(host((s, g) => (g === 2 && s % 10 === 0 ? { sm_clock_mhz: 1400, throttle_reasons: 0x40 } : {}))),
    ).toEqual([]);
    expect(
      run(host((_s, g) => (g === 1 ? { sm_clock_mhz: 300, throttle_reasons: 0x1 | 0x40, util_pct: 0 } : {}))),
    ).toEqual([]);
    expect(run(host(() => ({ sm_clock_mhz: 1700, throttle_reasons: 0x4 })))).toEqual([]);
    expect(run(host(() => ({ sm_clock_mhz: 1700, throttle_reasons: 0x2 | 0x10 })))).toEqual([]);
  });

  it('makes one host-level finding when the whole node is power-braked', () => {
    const fs = run(host((s) => (s >= 5 ? { sm_clock_mhz: 1000, throttle_reasons: 0x80 | 0x8 } : {})));
    const open = fs.filter((f) => f.state === 'open');
    expect(open).toHaveLength(1);
    expect(open[0].gpu).toBeUndefined();
    expect(open[0].action).toBe('drain');
    expect(open[0].evidence.gpus).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('resolves when clocks recover', () => {
    const fs = run(
      host((s, g) => (g === 0 && s >= 5 && s < 20 ? { sm_clock_mhz: 1500, throttle_reasons: 0x20 } : {}), 90),
    );
    expect(fs.map((f) => f.state)).toEqual(['open', 'resolved']);
    expect(fs[0].action).toBe('watch'); // SW thermal only
  });
});

describe('software power cap alone', () => {
  /** A 64-rank job whose rank 9 turns 15% slower at step 40, its GPU at the cap drawing `watts` while busy. */
  async function cappedJob(watts: number | undefined): Promise<{ fs: Finding[]; h: string; g: number }> {
    const { ClusterSim } = await import('../../sim/cluster.js');
    const { parseFault } = await import('../../sim/faults.js');
    const sim = new ClusterSim({
      ranks: 64,
      steps: 150,
      seed: 4,
      faults: [parseFault('slow_rank:rank=9,at=40,slowdown=0.15')],
    });
    const { host: h, gpu: g } = sim.faults[0];
    const events = [...sim.events()].map((e) =>
      e.kind === 'gpu' && e.host === h && e.gpu === g && e.util_pct! > 50
        ? { ...e, sm_clock_mhz: 1650, throttle_reasons: 0x4, ...(watts ? { power_w: watts } : {}) }
        : e,
    );
    return { fs: run(events), h, g: g! };
  }

  it('is a finding when that GPU alone sits at the cap, draws less than its peers, and a straggler names it', async () => {
    const { fs, h, g } = await cappedJob(450);
    const straggler = fs.find((f) => f.type === 'straggler' && f.state === 'open');
    const cap = fs.find((f) => f.type === 'throttle' && f.state === 'open');
    expect(straggler).toMatchObject({ host: h, gpu: g });
    expect(cap).toMatchObject({ host: h, gpu: g, action: 'watch' });
    expect(cap!.evidence.reasons).toEqual(['sw_power_cap']);
    expect(cap!.evidence.power_w).toBe(450);
    // The simulator's busy GPUs draw 640-680 W.
    expect(cap!.evidence.peer_median_power_w).toBeGreaterThan(640);
    expect(cap!.related).toContain(straggler!.id);
  });

  it('is no finding when the GPU at the cap draws what its peers draw: a slower bin, not a lower limit', async () => {
    const { fs, h, g } = await cappedJob(660);
    expect(fs.find((f) => f.type === 'straggler' && f.state === 'open')).toMatchObject({ host: h, gpu: g });
    expect(fs.filter((f) => f.type === 'throttle')).toEqual([]);
  });
});

describe('throttle and straggler', () => {
  it('stay linked through updates and resolution; the throttle carries the straggler latest cost', async () => {
    const { ClusterSim } = await import('../../sim/cluster.js');
    const { parseFault } = await import('../../sim/faults.js');
    const sim = new ClusterSim({
      ranks: 256,
      steps: 240,
      faults: [parseFault('throttle:rank=37,at=60,until=150')],
    });
    const fs = run([...sim.events()]);
    const throttle = fs.filter((f) => f.type === 'throttle');
    const straggler = fs.filter((f) => f.type === 'straggler');
    expect(throttle.at(-1)!.state).toBe('resolved');
    expect(straggler.at(-1)!.state).toBe('resolved');
    // open, at least one update carrying the link, resolved: the loops below are never empty.
    expect(straggler.length).toBeGreaterThanOrEqual(2);
    expect(throttle.length).toBeGreaterThanOrEqual(3);
    expect(throttle.filter((f) => f.state === 'update').length).toBeGreaterThanOrEqual(1);
    // The straggler may open first (it no longer waits when no other rank of the host is near its
    // threshold); every event from the throttle's opening on carries the link.
    const linked = straggler.filter((f) => f.ts >= throttle[0].ts);
    expect(linked.length).toBeGreaterThanOrEqual(2);
    for (const f of linked) expect(f.related).toEqual([throttle[0].id]);
    for (const f of throttle.slice(1)) expect(f.related).toEqual([straggler[0].id]);
    expect(throttle.at(-1)!.est_cost_pct).toBe(straggler.at(-1)!.est_cost_pct);
  });
});
