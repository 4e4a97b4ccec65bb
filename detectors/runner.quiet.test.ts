/**
 * Jobs that never say `finished`: they go stale, then end, and their open findings resolve with
 * the reason, at the same event time whether the end is seen live (idle clock, other traffic)
 * or at the end of a replayed file.
 */

import { describe, expect, it } from 'vitest';
import { costText } from '../core/figures.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { LIFECYCLE_DEFAULTS } from './findings.js';
import { DetectorRunner } from './runner.js';

const { staleFloorMs, endFloorMs } = LIFECYCLE_DEFAULTS;

/** A 16-rank job with a 30% slow rank from step 20, without its `finished` event; after `splitStep`, shifted by `gapMs`. */
function quietJob(job: string, gapMs = 0, splitStep = 1e9, startTs?: number): RankwatchEvent[] {
  const sim = new ClusterSim({
    job,
    ranks: 16,
    steps: 160,
    seed: 4,
    startTs,
    faults: [parseFault('slow_rank:rank=5,at=20,slowdown=0.3')],
  });
  let shifted = false;
  const out: RankwatchEvent[] = [];
  for (const e of sim.events()) {
    if (e.kind === 'job_event' && e.event === 'finished') continue;
    if (e.kind === 'step' && e.step >= splitStep) shifted = true;
    out.push(shifted ? { ...e, ts: e.ts + gapMs } : e);
  }
  return out;
}

function lastStepTs(events: RankwatchEvent[]): number {
  return Math.max(...events.filter((e) => e.kind === 'step').map((e) => e.ts));
}

const straggler = (fs: Finding[]) => fs.filter((f) => f.type === 'straggler');

describe('jobs that go quiet', () => {
  it('go stale, then end on the idle clock; their findings resolve with the reason at the end time', () => {
    const events = quietJob('j-quiet');
    const runner = new DetectorRunner();
    for (const e of events) runner.push(e);
    const before = runner.take().findings;
    const opened = straggler(before).filter((f) => f.state === 'open');
    expect(opened.length).toBe(1);
    const last = lastStepTs(events);

    runner.advance(last + staleFloorMs - 1_000);
    expect(runner.jobState('j-quiet')).toBe('running');
    runner.advance(last + staleFloorMs + 1_000);
    expect(runner.jobState('j-quiet')).toBe('stale');
    expect(runner.stats().stale_jobs).toBe(1);
    expect(runner.take().findings.filter((f) => f.state === 'resolved')).toEqual([]);
    expect(runner.openFindings().map((f) => f.id)).toContain(opened[0].id);

    runner.advance(last + endFloorMs + 30_000);
    const resolved = runner.take().findings.filter((f) => f.state === 'resolved');
    expect(resolved.map((f) => f.id)).toContain(opened[0].id);
    const r = resolved.find((f) => f.id === opened[0].id)!;
    // Ended at its last step plus the end threshold, not whenever the idle clock happened to tick.
    expect(r.ts).toBe(last + endFloorMs);
    expect(r.evidence).toMatchObject({ resolved_reason: 'job_quiet', quiet_since_ts: last });
    expect(r.resolution).toContain(`went quiet at ${new Date(last).toISOString()}`);
    // What it found and cost stays its summary: the reason it ended is said beside it.
    expect(r.summary).toMatch(/^rank 5 on \S+ computes .* costs the job ~\d+\.\d% of its throughput\.$/);
    expect(r.summary).toContain(`~${costText(r.est_cost_pct)}`);
    expect(runner.jobState('j-quiet')).toBeUndefined();
    expect(runner.openFindings().filter((f) => f.job === 'j-quiet' && f.type === 'straggler')).toEqual([]);
    expect(runner.stats().quiet_ended_jobs).toBe(1);
  });

  it('a replayed file ends the job at end of input with the same findings as the live run', () => {
    const events = quietJob('j-replay');
    const live = new DetectorRunner();
    for (const e of events) live.push(e);
    live.flush();
    live.advance(lastStepTs(events) + 3 * endFloorMs);
    const replay = new DetectorRunner();
    for (const e of events) replay.push(e);
    replay.endOfInput();
    const a = live.take().findings;
    const b = replay.take().findings;
    expect(b.some((f) => f.evidence.resolved_reason === 'job_quiet')).toBe(true);
    expect(b).toEqual(a);
  });

  it("other jobs' traffic moves the clock: a quiet job ends while another one runs", () => {
    const first = quietJob('j-first');
    const second = quietJob('j-second', 0, 1e9, lastStepTs(first) + 60_000);
    // The second job runs for ~3 minutes: not enough to end the first; stretched to 20 minutes it is.
    const runner = new DetectorRunner();
    for (const e of first) runner.push(e);
    for (const e of second) runner.push(e);
    expect(
      straggler(runner.take().findings).filter((f) => f.job === 'j-first' && f.state === 'resolved'),
    ).toEqual([]);
    const stretched = quietJob('j-third', 0, 1e9, lastStepTs(first) + endFloorMs + 5_000);
    for (const e of stretched.slice(0, 50)) runner.push(e);
    const resolved = straggler(runner.take().findings).filter(
      (f) => f.job === 'j-first' && f.state === 'resolved',
    );
    expect(resolved.length).toBe(1);
    expect(resolved[0].evidence.resolved_reason).toBe('job_quiet');
    // The second job stopped ~12 minutes before: stale, not yet ended; the third runs.
    expect(runner.jobState('j-second')).toBe('stale');
    expect(runner.jobState('j-third')).toBe('running');
  });

  it('a job that resumes while stale goes on: the same finding stays open', () => {
    const events = quietJob('j-pause', 5 * 60_000, 100);
    const runner = new DetectorRunner();
    for (const e of events) runner.push(e);
    runner.flush();
    const fs = straggler(runner.take().findings);
    expect(new Set(fs.map((f) => f.id)).size).toBe(1);
    expect(fs.some((f) => f.state === 'resolved')).toBe(false);
    expect(runner.jobState('j-pause')).toBe('running');
  });

  it('a job that resumes after it ended is a new run: the old finding resolved, a new one opens, MFU goes on', () => {
    const events = quietJob('j-resume', endFloorMs + 10 * 60_000, 100);
    const runner = new DetectorRunner();
    for (const e of events) runner.push(e);
    runner.flush();
    const { findings, mfu } = runner.take();
    const fs = straggler(findings);
    const ids = [...new Set(fs.map((f) => f.id))];
    expect(ids.length).toBe(2);
    const [oldId, newId] = ids;
    const old = fs.filter((f) => f.id === oldId);
    expect(old.at(-1)).toMatchObject({ state: 'resolved', evidence: { resolved_reason: 'job_quiet' } });
    const resumedAt = events.find((e) => e.kind === 'step' && e.step === 100)!.ts;
    expect(old.at(-1)!.ts).toBeLessThan(resumedAt);
    const fresh = fs.filter((f) => f.id === newId);
    expect(fresh[0].state).toBe('open');
    expect(fresh[0].ts).toBeGreaterThan(resumedAt);
    expect(fresh[0].rank).toBe(5);
    // The job's configuration came before the quiet spell and still gives MFU after it.
    expect(mfu.filter((p) => p.ts > resumedAt).length).toBeGreaterThan(0);
  });
  it('a job another process took over (a Kafka rebalance) is let go without a word, not ended here', () => {
    // Other traffic moves the watermark past the moved job's end: kept, its straggler would be
    // resolved here ("went quiet") while the job runs on under its new owner.
    const moved = quietJob('j-moved');
    const other = quietJob('j-other', 0, 1e9, lastStepTs(moved) + 1_000);
    const run = (forget: boolean) => {
      const runner = new DetectorRunner();
      for (const e of moved) runner.push(e);
      const opened = straggler(runner.take().findings).filter((f) => f.state === 'open');
      if (forget) runner.forget('j-moved');
      for (const e of other) runner.push(e);
      runner.advance(lastStepTs(other) + 3 * endFloorMs);
      const later = runner.take().findings.filter((f) => f.job === 'j-moved');
      return { opened, later, open: runner.openFindings().filter((f) => f.job === 'j-moved') };
    };
    const kept = run(false);
    expect(kept.opened.length).toBe(1);
    expect(kept.later.map((f) => f.state)).toContain('resolved');
    const letGo = run(true);
    expect(letGo.opened.length).toBe(1);
    expect(letGo.later).toEqual([]);
    expect(letGo.open).toEqual([]);
    expect(letGo.opened[0].id).toBe(kept.opened[0].id);
  });
});
