/**
 * Finding lifecycle: an incident opens once, is updated while it persists (rate-limited so
 * nobody is flooded), and resolves when the condition clears. Every state change is emitted
 * as a finding event sharing the incident's stable id.
 */
import { createHash } from 'node:crypto';
import { withCost } from '../core/figures.js';
import type { Action, Finding, Severity } from '../schema/finding.js';

export type FindingDraft = Omit<Finding, 'id' | 'state' | 'ts'>;

/** Stable id from what identifies the incident, so a replay gives the same ids. */
export function findingId(type: string, ...parts: (string | number | undefined)[]): string {
  const key = [type, ...parts.map((p) => (p === undefined ? '*' : String(p)))].join('|');
  return `${type}-${createHash('sha1').update(key).digest('hex').slice(0, 16)}`;
}

/** The finding with its summary saying the cost it carries (one figure, however it was patched). */
function said(f: Finding): Finding {
  const summary = withCost(f.summary, f.est_cost_pct);
  return summary === f.summary ? f : { ...f, summary };
}

export function severityForCost(costPct: number | undefined): Severity {
  if (costPct === undefined) return 'warning';
  if (costPct >= 5) return 'critical';
  if (costPct >= 1) return 'warning';
  return 'info';
}

export function actionForCost(costPct: number | undefined, hardware: boolean): Action {
  if (hardware) return (costPct ?? 0) >= 1 ? 'cordon' : 'watch';
  return (costPct ?? 0) >= 2 ? 'cordon' : 'watch';
}

interface OpenRecord {
  /** Latest figures, emitted or not. */
  finding: Finding;
  /** What was last sent out, the yardstick for "moved enough". */
  emitted: Finding;
}

export interface LifecycleConfig {
  /** Shortest event time between two updates of one finding. */
  minUpdateIntervalMs: number;
  /** Relative change in cost or slowdown that is worth an update. */
  updateChange: number;
  /** A job with no step for this many typical step times is stale (its findings stay open)... */
  staleAfterSteps: number;
  /** ...but never sooner than this. */
  staleFloorMs: number;
  /** A job with no step for this many typical step times has ended: its findings resolve... */
  endAfterSteps: number;
  /** ...but never sooner than this (a checkpoint save or a restart is a quiet spell, not an end). */
  endFloorMs: number;
}

export const LIFECYCLE_DEFAULTS: LifecycleConfig = {
  minUpdateIntervalMs: 60_000,
  updateChange: 0.25,
  staleAfterSteps: 10,
  staleFloorMs: 120_000,
  endAfterSteps: 30,
  endFloorMs: 900_000,
};

export class FindingLog {
  private readonly open = new Map<string, OpenRecord>();

  constructor(
    private out: Finding[],
    private readonly cfg: LifecycleConfig = LIFECYCLE_DEFAULTS,
  ) {}

  /** Sends further finding events to a new array (the runner hands the old one out). */
  retarget(out: Finding[]): void {
    this.out = out;
  }

  isOpen(id: string): boolean {
    return this.open.has(id);
  }

  get(id: string): Finding | undefined {
    return this.open.get(id)?.finding;
  }

  openFindings(): Finding[] {
    return [...this.open.values()].map((r) => r.finding);
  }

  /** Opens an incident; a second open of the same id is ignored (idempotent under redelivery). */
  openFinding(id: string, ts: number, draft: FindingDraft): Finding | undefined {
    if (this.open.has(id)) return undefined;
    const f: Finding = said({ id, ts, state: 'open', ...draft });
    this.open.set(id, { finding: f, emitted: f });
    this.out.push(f);
    return f;
  }

  /** Emits an update when `changed` says the figures moved enough and the interval has passed. */
  update(id: string, ts: number, patch: Partial<FindingDraft>, force = false): void {
    const rec = this.open.get(id);
    if (!rec) return;
    const next: Finding = said({ ...rec.finding, ...patch, id, ts, state: 'update' });
    rec.finding = next;
    const due = ts - rec.emitted.ts >= this.cfg.minUpdateIntervalMs;
    if (force || (due && this.moved(rec.emitted, next))) {
      rec.emitted = next;
      this.out.push(next);
    }
  }

  /** Changes the latest figures without emitting anything (the next update or resolve carries them). */
  amend(id: string, patch: Partial<FindingDraft>): void {
    const rec = this.open.get(id);
    if (rec) rec.finding = said({ ...rec.finding, ...patch });
  }

  /**
   * Resolves an incident with its latest figures and the summary that says them (what it found
   * and cost while open); a `summary` given here says why it ended, as `resolution`.
   */
  resolve(id: string, ts: number, patch: Partial<FindingDraft> = {}): void {
    const rec = this.open.get(id);
    if (!rec) return;
    this.open.delete(id);
    const { summary: resolution, ...rest } = patch;
    this.out.push(
      said({ ...rec.finding, ...rest, id, ts, state: 'resolved', ...(resolution ? { resolution } : {}) }),
    );
  }

  /** Drops an open incident without a word: another process carries it on (see DetectorRunner.forget). */
  forget(id: string): void {
    this.open.delete(id);
  }

  private moved(prev: Finding, next: Finding): boolean {
    const rel = (a: unknown, b: unknown) =>
      typeof a === 'number' &&
      typeof b === 'number' &&
      Math.abs(a - b) > this.cfg.updateChange * Math.max(Math.abs(b), 0.5);
    return (
      rel(next.est_cost_pct, prev.est_cost_pct) ||
      rel(next.evidence.slowdown_pct, prev.evidence.slowdown_pct) ||
      next.severity !== prev.severity ||
      (next.related?.length ?? 0) !== (prev.related?.length ?? 0)
    );
  }
}
