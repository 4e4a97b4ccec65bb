import { describe, expect, it } from 'vitest';
import { type JobRecord, jobTimeline } from './interruptions.js';
import { jobAdvice } from './job-advice.js';
import { failureRates } from './rates.js';

const MIN = 60_000;
const T0 = Date.UTC(2026, 0, 1);
const at = (m: number) => T0 + m * MIN;
const life = (m: number, event: string, cause = '') => ({
  ts: at(m),
  job: 'j',
  event,
  cause,
  world_size: event === 'config' ? 16 : -1,
  gpu_model: '',
});

function record(saves: [number, number][], events: [number, string][]): JobRecord {
  return {
    job: 'j',
    hosts: ['a', 'b'],
    lifecycle: [
      life(0, 'config'),
      life(0, 'start'),
      ...events.map(([m, e]) => life(m, e, e === 'interrupted' ? 'NIC' : '')),
    ],
    faults: [],
    saves: saves.map(([m, durS], i) => ({ ts: at(m), job: 'j', step: i, dur_ms: durS * 1000, ok: true })),
  };
}

describe('jobAdvice inputs', () => {
  it("takes each input from the job's own record and says so", () => {
    // Saves every 31 min of wall time lasting 60 s: τ = 30 min. One interruption at 100 min, back at 120.
    const rec = record(
      [31, 62, 93, 134, 165].map((m) => [m, 60] as [number, number]),
      [
        [100, 'interrupted'],
        [120, 'restart'],
        [200, 'finished'],
      ],
    );
    const t = jobTimeline(rec, at(1000));
    const a = jobAdvice(t, rec.saves);
    expect(a.inputs.saveS).toEqual({
      value: 60,
      source: "mean of the job's 5 successful save(s) (checkpoint events, phase save)",
    });
    // Gaps 31, 31, 31 (134 → 165; 93 → 134 spans the interruption and is left out), minus 1 min of save.
    expect(a.inputs.intervalS.value).toBe(1800);
    expect(a.inputs.restartS.value).toBe(1200);
    // Up 200 − 20 = 180 min for 1 interruption: M = 3 h; 95% for 1 event is [0.0253, 5.5716], so
    // M lies in [3 / 5.5716, 3 / 0.0253] = [0.5, 118.5] h.
    expect(a.inputs.mtbfS.value).toBe(3 * 3600);
    expect(a.inputs.mtbfS.source).toMatch(
      /^the job's own 1 interruption\(s\) over 3 h up \(95%: 0\.5–118\.5 h\); few events/,
    );
    expect(a.advice.ok).toBe(true);
  });

  it('falls back to the fleet rate for its size, and says when nothing gives a rate', () => {
    const rec = record(
      [
        [30, 60],
        [61, 60],
      ],
      [[120, 'finished']],
    );
    const t = jobTimeline(rec, at(1000));
    const none = jobAdvice(t, rec.saves, failureRates([t], 'cause'));
    expect(none.advice.ok).toBe(false);
    expect(none.inputs.mtbfS.source).toMatch(/no interruption recorded for j or the fleet yet/);
    const other = jobTimeline(
      record(
        [],
        [
          [60, 'interrupted'],
          [70, 'restart'],
          [600, 'finished'],
        ],
      ),
      at(1000),
    );
    const withFleet = jobAdvice(t, rec.saves, failureRates([t, other], 'cause', 16));
    expect(withFleet.inputs.mtbfS.source).toMatch(
      /^no interruption of j yet: the fleet's 1 interruption\(s\)/,
    );
    expect(withFleet.advice.ok).toBe(true);
  });

  it('leaves out an interval that cannot be true and names the likely wrong input', () => {
    // Saves "lasting" 5 min, 1 min apart: the durations or the times are wrong.
    const rec = record(
      [
        [10, 300],
        [11, 300],
        [12, 300],
      ],
      [[60, 'finished']],
    );
    const a = jobAdvice(jobTimeline(rec, at(100)), rec.saves);
    expect(a.inputs.intervalS.value).toBeUndefined();
    expect(a.inputs.intervalS.source).toMatch(/dur_ms or the event times are likely wrong/);
  });
});
