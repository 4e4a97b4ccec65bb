import { describe, expect, it } from 'vitest';
import { LIFECYCLE_DEFAULTS } from './findings.js';
import { QuietTracker } from './quiet.js';

const cfg = {
  ...LIFECYCLE_DEFAULTS,
  staleAfterSteps: 10,
  staleFloorMs: 60_000,
  endAfterSteps: 30,
  endFloorMs: 300_000,
};

describe('quiet jobs', () => {
  it('waits N step times, never less than the floor', () => {
    const q = new QuietTracker(cfg);
    q.step('fast', 0);
    q.stepTime('fast', 1_000);
    q.step('slow', 0);
    q.stepTime('slow', 20_000);
    expect(q.thresholds('fast')).toEqual({ staleMs: 60_000, endMs: 300_000 });
    expect(q.thresholds('slow')).toEqual({ staleMs: 200_000, endMs: 600_000 });
  });

  it('one long step (a checkpoint) moves the typical step time at most 4x its share', () => {
    const q = new QuietTracker(cfg);
    q.step('j', 0);
    q.stepTime('j', 1_000);
    q.stepTime('j', 600_000);
    expect(q.thresholds('j')?.staleMs).toBe(60_000); // 10 x 1,300 ms is still under the floor
  });

  it('goes stale, then ends at its last step plus the threshold, whatever the watermark', () => {
    const q = new QuietTracker(cfg);
    q.step('j', 1_000);
    expect(q.advance(50_000, true)).toEqual({ stale: [], ended: [] });
    expect(q.advance(70_000, true)).toEqual({ stale: ['j'], ended: [] });
    expect(q.advance(80_000, true)?.stale).toEqual([]); // said once
    expect(q.state('j')).toBe('stale');
    q.step('j', 90_000);
    expect(q.state('j')).toBe('running');
    expect(q.advance(10_000_000, true)?.ended).toEqual([{ job: 'j', lastStepTs: 90_000, endTs: 390_000 }]);
  });

  it('never moves back, and sweeps at most once a second of event time unless forced', () => {
    const q = new QuietTracker(cfg);
    q.step('j', 0);
    q.advance(1_000);
    q.advance(70_000, true);
    expect(q.state('j')).toBe('stale');
    q.step('j', 70_500);
    expect(q.advance(10)).toBeUndefined(); // an old timestamp does not move the clock back
    expect(q.advance(130_400)?.stale).toEqual([]); // quiet 59.9 s: not yet
    expect(q.advance(130_600)).toBeUndefined(); // stale by now, but within a second of the last sweep
    expect(q.advance(131_500)?.stale).toEqual(['j']);
  });

  it('a step after the end threshold reports the end it missed and changes nothing', () => {
    const q = new QuietTracker(cfg);
    expect(q.step('j', 0)).toBeUndefined();
    expect(q.step('j', 299_999)).toBeUndefined();
    expect(q.step('j', 299_999 + 300_000)).toEqual({ job: 'j', lastStepTs: 299_999, endTs: 599_999 });
    expect(q.thresholds('j')).toEqual({ staleMs: 60_000, endMs: 300_000 });
  });

  it('without floors, a job waits for its first step time before it can go stale', () => {
    const q = new QuietTracker({ ...cfg, staleFloorMs: 0, endFloorMs: 0 });
    q.seen('j', 0);
    expect(q.advance(1e12, true)).toEqual({ stale: [], ended: [] });
  });
});
