import { describe, expect, it } from 'vitest';
import { collapseSaves, minuteSpans } from './from-events.js';
import { type JobRecord, jobTimeline } from './interruptions.js';
import { failureRates } from './rates.js';

const MIN = 60_000;
const T0 = Date.UTC(2026, 0, 1);
const at = (m: number) => T0 + m * MIN;
const life = (m: number, event: string, cause = '') => ({
  ts: at(m),
  job: 'j',
  event,
  cause,
  world_size: event === 'config' ? 64 : -1,
  gpu_model: event === 'config' ? 'H100-SXM' : '',
});
const save = (m: number, step: number, durS = 30) => ({
  ts: at(m),
  job: 'j',
  step,
  dur_ms: durS * 1000,
  ok: true,
});

describe('jobTimeline', () => {
  it('times each interruption (rework since the last save + downtime) and the ETTR, by hand', () => {
    const rec: JobRecord = {
      job: 'j',
      hosts: Array.from({ length: 8 }, (_, i) => `h${i}`),
      lifecycle: [
        life(0, 'config'),
        life(0, 'start'),
        life(100, 'interrupted', 'Faulty GPU'),
        life(110, 'restart'),
        life(250, 'interrupted'),
        life(265, 'restart'),
        life(400, 'finished'),
      ],
      // The second interruption has no cause: the XID on h3 four minutes before it is.
      faults: [
        {
          ts: at(246),
          host: 'h3',
          gpu: 5,
          job: '',
          source: 'xid',
          code: '79',
          message: 'fallen off the bus',
        },
      ],
      saves: [
        save(30, 30),
        save(60, 60),
        save(90, 90),
        save(140, 120),
        save(170, 150),
        save(200, 180),
        save(230, 210),
        save(300, 240),
      ],
    };
    const t = jobTimeline(rec, at(1000));
    expect(t.interruptions.map((i) => [i.cause, i.group, i.cause_from, i.host ?? null])).toEqual([
      ['faulty_gpu', 'gpu', 'job_event', null],
      ['xid_79', 'gpu', 'fault', 'h3'],
    ]);
    // First: rework 100 − 90 = 10 min, down 10 min: 20 min. Second: 250 − 230 = 20 min, down 15: 35 min.
    expect(t.interruptions.map((i) => i.lost_ms / MIN)).toEqual([20, 35]);
    // Wall 400 min, down 25 → up 375 min. Saves 8 × 30 s = 4 min. ETTR = 1 − (55 + 4) / 400 = 0.8525.
    expect(t.up_ms / MIN).toBe(375);
    expect(t.ettr).toBeCloseTo(0.8525, 10);
    // 2 interruptions over 64 GPUs × 6.25 h = 400 GPU-hours: 5000 per 10⁶ GPU-hours; MTBF for 64 GPUs = 3.125 h.
    const r = failureRates([t], 'group');
    expect(r.fleet.gpu_hours).toBeCloseTo(400, 9);
    expect(r.fleet.per_1m_gpu_hours!.rate).toBeCloseTo(5000, 6);
    expect(r.mtbf!.hours).toBeCloseTo(3.125, 9);
    expect(r.fleet.few).toBe(true);
    expect(r.rows.find((x) => x.key === 'gpu')!.count).toBe(2);
  });

  it('infers an interruption from a gap in steps, and counts rework from the start before any save', () => {
    const minutes = [
      ...Array.from({ length: 50 }, (_, i) => i),
      ...Array.from({ length: 30 }, (_, i) => 80 + i),
    ].map((m) => T0 / MIN + m);
    const t = jobTimeline(
      {
        job: 'j',
        hosts: [],
        lifecycle: [life(0, 'config'), life(0, 'start')],
        faults: [],
        saves: [],
        activity: minuteSpans(minutes),
      },
      at(110),
    );
    expect(t.interruptions).toHaveLength(1);
    const i = t.interruptions[0];
    expect([i.seen_from, i.cause, i.ts, i.restart_ts]).toEqual(['step_gap', 'unknown', at(50), at(80)]);
    expect(i.last_save_ts).toBeNull();
    expect(i.lost_ms).toBe(80 * MIN);
    expect(t.notes.join(' ')).toMatch(/before any completed save/);
  });

  it('does not count work twice when a job fails again before its next save', () => {
    const t = jobTimeline(
      {
        job: 'j',
        hosts: [],
        lifecycle: [
          life(0, 'config'),
          life(0, 'start'),
          life(50, 'interrupted'),
          life(60, 'restart'),
          life(70, 'interrupted'),
          life(80, 'restart'),
          life(200, 'finished'),
        ],
        faults: [],
        saves: [save(40, 40)],
      },
      at(300),
    );
    // First: 50 − 40 = 10 min redone + 10 down. Second: 70 − 60 (the restart, not the save at 40) + 10 down.
    expect(t.interruptions.map((i) => [i.rework_ms / MIN, i.lost_ms / MIN])).toEqual([
      [10, 20],
      [10, 20],
    ]);
  });

  it('counts a save reported by every rank once, with the slowest rank', () => {
    const rows = [0, 1, 2, 3].map((rank) => ({
      ts: at(10) + rank,
      job: 'j',
      step: 10,
      dur_ms: 1000 + rank * 100,
      ok: rank !== 2,
    }));
    expect(collapseSaves(rows)).toEqual([{ ts: at(10) + 3, job: 'j', step: 10, dur_ms: 1300, ok: false }]);
  });
});
