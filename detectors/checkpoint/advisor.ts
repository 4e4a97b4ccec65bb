/**
 * The `checkpoint_interval` finding in the live stream: from a job's own checkpoint saves and
 * lifecycle events, the same inputs `rankwatch checkpoint --job` reads from the store:
 *
 * - δ: mean duration of its successful saves (a save reported by every rank counts once, with its
 *   slowest rank's duration);
 * - τ: median of the recent gaps between consecutive saves with no interruption between, minus δ
 *   of the later save;
 * - R: mean interrupted → restart time (0 until one is seen);
 * - M: its up time / its interruptions; with none yet, the configured fleet MTBF per GPU divided by
 *   its GPUs; with neither, no finding (the advice would be a guess). Below `minInterruptions`
 *   the job's own count is too few to alert on, and the fleet MTBF (if any) is used.
 *
 * A save is taken as complete when the next save (a higher step) begins, so every rank's report of
 * it has arrived; the advice is re-checked then, and on each restart after an interruption: at most
 * once per change.
 * Pure: events and event time in, findings out through the FindingLog; state is O(1) per job.
 */
import { adviseCheckpoint } from '../../analytics/checkpoint.js';
import type { CheckpointEvent, JobLifecycleEvent } from '../../schema/events.js';
import { type FindingLog, findingId } from '../findings.js';
import {
  CHECKPOINT_INTERVAL_DEFAULTS,
  type CheckpointIntervalConfig,
  checkpointIntervalFinding,
} from './interval.js';

export interface CheckpointAdvisorConfig extends CheckpointIntervalConfig {
  /**
   * Fleet MTBF of one GPU, hours (fleet GPU-hours up per interruption: `rankwatch failures` gives
   * it as 1 / rate per GPU-hour); a job of N GPUs with no interruption of its own gets this / N.
   * Undefined: such a job gets no finding.
   */
  gpuMtbfH?: number;
  /**
   * Interruptions of its own before a job's MTBF is taken from them (until then the fleet MTBF, if
   * configured): one or two give an interval too wide to alert on (95% for 1: 0.18 to 40 × the estimate).
   */
  minInterruptions: number;
}

export const CHECKPOINT_ADVISOR_DEFAULTS: CheckpointAdvisorConfig = {
  ...CHECKPOINT_INTERVAL_DEFAULTS,
  gpuMtbfH: undefined,
  minInterruptions: 3,
};

/** Gaps kept for the median: recent ones, so a job that changes its interval is seen to. */
const GAPS = 15;
/** Jobs tracked at once; the oldest is dropped beyond it (a job that never says `finished`). */
const MAX_JOBS = 10_000;

interface Save {
  step: number;
  ts: number;
  durMs: number;
  ok: boolean;
}

interface JobSaves {
  /** The save being reported (ranks may still report it). */
  cur?: Save;
  /** The last complete successful save with no interruption since (start of the next gap). */
  prev?: Save;
  saves: number;
  saveMsSum: number;
  gaps: number[];
  interruptions: number;
  upMs: number;
  /** Up since (start, restart or first event); undefined while down. */
  upSince?: number;
  downSince?: number;
  restarts: number;
  restartMsSum: number;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

export class CheckpointAdvisor {
  private readonly jobs = new Map<string, JobSaves>();

  constructor(
    private readonly log: FindingLog,
    /** The job's GPUs (world size from its job event), when known. */
    private readonly gpusOf: (job: string) => number | undefined,
    private readonly cfg: CheckpointAdvisorConfig = CHECKPOINT_ADVISOR_DEFAULTS,
  ) {}

  process(e: CheckpointEvent | JobLifecycleEvent): void {
    if (e.kind === 'checkpoint') {
      if (e.phase === 'save') this.onSave(e);
      return;
    }
    if (e.event === 'finished') {
      this.end(e.job, e.ts);
      return;
    }
    const j = this.state(e.job, e.ts);
    if (e.event === 'interrupted') {
      this.complete(j);
      if (j.upSince !== undefined) j.upMs += Math.max(0, e.ts - j.upSince);
      j.upSince = undefined;
      j.downSince = e.ts;
      j.interruptions++;
      // No gap is measured across an interruption.
      j.prev = undefined;
    } else {
      const restarted = j.downSince !== undefined && e.event === 'restart';
      if (restarted) {
        j.restarts++;
        j.restartMsSum += Math.max(0, e.ts - j.downSince!);
      }
      j.downSince = undefined;
      j.upSince ??= e.ts;
      // The failure rate and the restart time both changed: check once, now that both are known.
      if (restarted) this.check(e.job, j, e.ts);
    }
  }

  private state(job: string, ts: number): JobSaves {
    let j = this.jobs.get(job);
    if (!j) {
      j = {
        saves: 0,
        saveMsSum: 0,
        gaps: [],
        interruptions: 0,
        upMs: 0,
        upSince: ts,
        restarts: 0,
        restartMsSum: 0,
      };
      this.jobs.set(job, j);
      if (this.jobs.size > MAX_JOBS) this.jobs.delete(this.jobs.keys().next().value!);
    }
    return j;
  }

  private onSave(e: CheckpointEvent): void {
    const j = this.state(e.job, e.ts);
    const cur = j.cur;
    if (cur && e.step === cur.step) {
      // Another rank's report of the same save: it ends with the last, lasts as long as the slowest.
      cur.ts = Math.max(cur.ts, e.ts);
      cur.durMs = Math.max(cur.durMs, e.dur_ms);
      cur.ok &&= e.ok;
      return;
    }
    if (cur && e.step < cur.step) return; // a late report of an earlier save
    const changed = this.complete(j);
    j.cur = { step: e.step, ts: e.ts, durMs: e.dur_ms, ok: e.ok };
    if (changed) this.check(e.job, j, e.ts);
  }

  /** Counts the save being reported as complete; true when it was a successful one. */
  private complete(j: JobSaves): boolean {
    const s = j.cur;
    j.cur = undefined;
    if (!s?.ok || !(s.durMs > 0)) return false;
    j.saves++;
    j.saveMsSum += s.durMs;
    if (j.prev) {
      j.gaps.push(s.ts - j.prev.ts - s.durMs);
      if (j.gaps.length > GAPS) j.gaps.shift();
    }
    j.prev = s;
    return true;
  }

  private check(job: string, j: JobSaves, ts: number): void {
    if (!j.saves || !j.gaps.length) return;
    const saveS = j.saveMsSum / j.saves / 1000;
    const intervalS = median(j.gaps) / 1000;
    // Saves longer than the time between them cannot be: leave the interval out rather than advise on it.
    if (!(intervalS > 0)) return;
    const upMs = j.upMs + (j.upSince === undefined ? 0 : Math.max(0, ts - j.upSince));
    const gpus = this.gpusOf(job);
    let mtbfS: number | undefined;
    let mtbfFrom: string;
    if (j.interruptions >= Math.max(1, this.cfg.minInterruptions) && upMs > 0) {
      mtbfS = upMs / j.interruptions / 1000;
      mtbfFrom = `the job's ${j.interruptions} interruption(s) over ${Math.round(upMs / 360_000) / 10} h up`;
    } else if (this.cfg.gpuMtbfH !== undefined && this.cfg.gpuMtbfH > 0 && gpus && gpus > 0) {
      mtbfS = (this.cfg.gpuMtbfH * 3600) / gpus;
      mtbfFrom = `the configured fleet MTBF of ${this.cfg.gpuMtbfH} GPU-hours over its ${gpus} GPUs`;
    } else return;
    const restartS = j.restarts ? j.restartMsSum / j.restarts / 1000 : 0;
    const advice = adviseCheckpoint({ saveS, mtbfS, restartS, intervalS });
    if (!advice.ok) return;
    const f = checkpointIntervalFinding(job, advice, ts, this.cfg);
    const id = findingId('checkpoint_interval', job);
    if (!f) {
      if (this.log.isOpen(id))
        this.log.resolve(id, ts, {
          summary: `${job}: its checkpoint interval now keeps goodput within ${this.cfg.maxLossPct}% of the advised one.`,
          evidence: {
            ...this.log.get(id)?.evidence,
            current_s: Math.round(intervalS * 10) / 10,
            resolved_reason: 'interval_within_threshold',
          },
          est_cost_pct: Math.max(0, Math.round((advice.currentLossPct ?? 0) * 100) / 100),
        });
      return;
    }
    const { id: _id, ts: _ts, state: _state, ...draft } = f;
    draft.evidence = {
      ...draft.evidence,
      mtbf_from: mtbfFrom,
      saves: j.saves,
      interruptions: j.interruptions,
      restarts: j.restarts,
    };
    if (this.log.isOpen(id)) this.log.update(id, ts, draft);
    else this.log.openFinding(id, ts, draft);
  }

  /** The job finished: its advice no longer applies. */
  private end(job: string, ts: number): void {
    this.jobs.delete(job);
    const id = findingId('checkpoint_interval', job);
    if (this.log.isOpen(id))
      this.log.resolve(id, ts, {
        summary: `${job} finished: its checkpoint advice no longer applies.`,
        evidence: { ...this.log.get(id)?.evidence, resolved_reason: 'job_finished' },
      });
  }
}
