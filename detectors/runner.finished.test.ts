/**
 * A job's last collectives can reach the detectors after its `finished` event: a node collector
 * sends each step's reduced collectives seconds after the step. They belong to the run that
 * ended: counted, not judged, and they do not bring the job back as a job of its own.
 */
import { describe, expect, it } from 'vitest';
import type { RankwatchEvent } from '../schema/events.js';
import { ClusterSim } from '../sim/cluster.js';
import { LIFECYCLE_DEFAULTS } from './findings.js';
import { DetectorRunner } from './runner.js';

describe('collectives after the job finished', () => {
  it('are counted, not judged, and leave no job behind', () => {
    const runner = new DetectorRunner();
    const late: RankwatchEvent[] = [];
    let last = 0;
    for (const e of new ClusterSim({
      job: 'j-done',
      ranks: 16,
      steps: 30,
      seed: 2,
      telemetry: false,
    }).events()) {
      // The last two steps' collectives held back, as a collector's settle time holds them.
      if (e.kind === 'collective' && e.step >= 28) late.push(e);
      else runner.push(e);
      last = Math.max(last, e.ts);
    }
    expect(runner.jobState('j-done')).toBeUndefined();
    for (const e of late) runner.push(e);
    expect(runner.stats()).toMatchObject({ jobs: 0, collectives_after_finish: late.length });
    runner.advance(last + 3 * LIFECYCLE_DEFAULTS.endFloorMs);
    expect(runner.stats().quiet_ended_jobs).toBe(0);
    expect(runner.take().findings.filter((f) => f.job === 'j-done' && f.state === 'open')).toEqual([]);
  });
});

describe('step counters of a job that finished', () => {
  it('keep its late and duplicate steps once its state is gone', () => {
    const runner = new DetectorRunner();
    const steps: RankwatchEvent[] = [];
    for (const e of new ClusterSim({
      job: 'j-counted',
      ranks: 8,
      steps: 20,
      seed: 3,
      telemetry: false,
    }).events()) {
      if (e.kind === 'step' && e.step === 5 && e.rank === 0) {
        runner.push(e);
        runner.push(e); // sent twice: a duplicate
      } else if (e.kind === 'step' && e.step === 6 && e.rank === 1) steps.push(e);
      else if (e.kind === 'job_event' && e.event === 'finished') {
        for (const late of steps) runner.push(late); // step 6 closed without it: late
        runner.push(e);
      } else runner.push(e);
    }
    expect(runner.jobState('j-counted')).toBeUndefined();
    expect(runner.stats()).toMatchObject({ jobs: 0, duplicate_steps: 1, late_steps: 1 });
  });
});
