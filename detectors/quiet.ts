/**
 * Jobs that go quiet. Real jobs rarely send `job_event finished`: they crash, are cancelled or
 * just stop. A job with no step for N times its typical step time (never less than a floor) is
 * *stale*; for longer (M times, with its own floor) it has *ended*, and the runner resolves its
 * open findings.
 *
 * Pure, with no clock of its own: time is a watermark that only moves forward, advanced by the
 * event time of all traffic and, when the bus is idle, by a `now` its caller derives from the
 * wall clock. The moment a job went stale or ended is a deadline computed from its last step, not
 * the watermark that revealed it, so a live run and a replay of the same events agree.
 */
import type { LifecycleConfig } from './findings.js';

export type QuietState = 'running' | 'stale';

interface Tracked {
  lastStepTs: number;
  /** Smoothed wall step time; 0 until a step closed. */
  typicalMs: number;
  state: QuietState;
  /** Thresholds from typicalMs, kept up to date so the per-event path does no arithmetic. */
  staleMs: number;
  endMs: number;
}

export interface QuietEnd {
  job: string;
  /** Event time of the job's last step (or first sight, with no step). */
  lastStepTs: number;
  /** When it counts as ended: lastStepTs plus the end threshold. */
  endTs: number;
}

/** Sweeps run at most this often in watermark time: the per-event cost stays O(1). */
const SWEEP_EVERY_MS = 1_000;

export interface QuietSweep {
  stale: string[];
  ended: QuietEnd[];
}

export class QuietTracker {
  private readonly jobs = new Map<string, Tracked>();
  private watermark = 0;
  private nextSweep = 0;
  /** A job's own clock, where it has one (`judgeBy`). */
  private clockOf?: (job: string) => number | undefined;

  constructor(private readonly cfg: LifecycleConfig) {}

  /** A job seen (any event naming it): tracked from now, if it was not already. */
  seen(job: string, ts: number): void {
    if (!this.jobs.has(job)) this.track(job, ts);
  }

  /**
   * A step of the job: it is running again. A step that comes after the job had already ended
   * changes nothing and returns that end: the caller ends the old run, then calls step() again.
   */
  step(job: string, ts: number): QuietEnd | undefined {
    const t = this.jobs.get(job);
    if (!t) {
      this.track(job, ts);
      return undefined;
    }
    if (ts - t.lastStepTs >= t.endMs) return { job, lastStepTs: t.lastStepTs, endTs: t.lastStepTs + t.endMs };
    if (ts > t.lastStepTs) t.lastStepTs = ts;
    t.state = 'running';
    return undefined;
  }

  private track(job: string, ts: number): void {
    const t: Tracked = { lastStepTs: ts, typicalMs: 0, state: 'running', staleMs: 0, endMs: 0 };
    this.setThresholds(t);
    this.jobs.set(job, t);
  }

  /** A closed step's wall time. Clipped to 4x either way, so one checkpoint or stall cannot move it far. */
  stepTime(job: string, ms: number): void {
    const t = this.jobs.get(job);
    if (!t || !(ms > 0)) return;
    if (t.typicalMs === 0) t.typicalMs = ms;
    else t.typicalMs += 0.1 * (Math.min(4 * t.typicalMs, Math.max(t.typicalMs / 4, ms)) - t.typicalMs);
    this.setThresholds(t);
  }

  forget(job: string): void {
    this.jobs.delete(job);
  }

  state(job: string): QuietState | undefined {
    return this.jobs.get(job)?.state;
  }

  /** Milliseconds without a step after which the job is stale, and after which it has ended. */
  thresholds(job: string): { staleMs: number; endMs: number } | undefined {
    const t = this.jobs.get(job);
    return t && { staleMs: t.staleMs, endMs: t.endMs };
  }

  private setThresholds(t: Tracked): void {
    const c = this.cfg;
    // Before its first step closed, only the floors apply (none at all: wait for a step time).
    const after = (steps: number, floor: number) =>
      t.typicalMs > 0 ? Math.max(steps * t.typicalMs, floor) : floor > 0 ? floor : Number.POSITIVE_INFINITY;
    t.staleMs = after(c.staleAfterSteps, c.staleFloorMs);
    t.endMs = after(c.endAfterSteps, c.endFloorMs);
  }

  /**
   * Jobs judged on a clock of their own where `clockOf` gives one, never past the watermark: a
   * sharded job's steps come through its host groups' shards (detectors/job-stage.ts), and one of
   * them behind another job's is not quiet on that job's time.
   */
  judgeBy(clockOf: (job: string) => number | undefined): void {
    this.clockOf = clockOf;
  }

  /**
   * Moves the watermark to `ts` (never back) and says which jobs turned stale and which ended.
   * Without `force`, sweeps at most once per second of watermark time (undefined: no sweep).
   */
  advance(ts: number, force = false): QuietSweep | undefined {
    if (ts > this.watermark) this.watermark = ts;
    if (!force && this.watermark < this.nextSweep) return undefined;
    this.nextSweep = this.watermark + SWEEP_EVERY_MS;
    const stale: string[] = [];
    const ended: QuietEnd[] = [];
    for (const [job, t] of this.jobs) {
      const own = this.clockOf?.(job);
      const quiet = (own === undefined || own > this.watermark ? this.watermark : own) - t.lastStepTs;
      if (quiet >= t.endMs) ended.push({ job, lastStepTs: t.lastStepTs, endTs: t.lastStepTs + t.endMs });
      else if (quiet >= t.staleMs && t.state === 'running') {
        t.state = 'stale';
        stale.push(job);
      }
    }
    return { stale, ended };
  }

  /** End of input: every job still tracked ends, each at its own deadline. */
  endAll(): QuietEnd[] {
    return [...this.jobs]
      .filter(([, t]) => Number.isFinite(t.endMs))
      .map(([job, t]) => ({ job, lastStepTs: t.lastStepTs, endTs: t.lastStepTs + t.endMs }));
  }
}
