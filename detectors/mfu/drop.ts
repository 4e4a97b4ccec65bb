/**
 * MFU drop: a job's MFU falling by `margin` against its own recent baseline. The short-term
 * figure is the median of the last `window` steps (stalls and checkpoints are single-step dips
 * and cannot move a median); the baseline is a slow average of it, frozen while a drop is
 * suspected or open. The finding links the open findings of the job that probably explain it,
 * the costliest first.
 *
 * Heavy-tailed steps (GC pauses, a slow filesystem on many steps) can move a median while the
 * job's fast steps run as fast as ever: a drop needs its fast steps (the window's 90th percentile
 * of MFU) to fall too, by half the margin. A restart refills the window. Only a finding with a
 * cost is named as the cause; without one the drop says nothing explains it.
 */
import { costFigure, costText, mfuText } from '../../core/figures.js';
import { round } from '../../core/round.js';
import type { Finding } from '../../schema/finding.js';
import type { MfuPoint } from '../../schema/output.js';
import { type FindingLog, findingId } from '../findings.js';

export interface MfuDropConfig {
  /** Relative fall that counts as a drop (0.1 = 10% below baseline). */
  margin: number;
  window: number;
  baselineAlpha: number;
  /** Steps of history before a baseline is trusted. */
  minBaselineSteps: number;
  /** Consecutive steps below the margin that open a finding. */
  sustainSteps: number;
  /** Consecutive steps back within half the margin that resolve it. */
  resolveSteps: number;
  /** A finding is a probable cause only when it costs the job at least this share (percent). */
  minCauseCostPct: number;
}

export const MFU_DROP_DEFAULTS: MfuDropConfig = {
  margin: 0.1,
  window: 21,
  baselineAlpha: 0.02,
  minBaselineSteps: 30,
  sustainSteps: 5,
  resolveSteps: 10,
  minCauseCostPct: 1,
};

const CAUSE_TYPES = new Set(['straggler', 'throttle', 'slow_link']);

export class MfuDropDetector {
  private readonly ring: Float64Array;
  private readonly scratch: Float64Array;
  private count = 0;
  private baseline: number | undefined;
  /** Baseline of the window's fast steps (90th percentile of MFU). */
  private fastBaseline: number | undefined;
  private below = 0;
  private above = 0;
  private id: string | undefined;
  private onsetTs = 0;
  private onsetStep = 0;

  constructor(
    private readonly job: string,
    private readonly log: FindingLog,
    private readonly cfg: MfuDropConfig = MFU_DROP_DEFAULTS,
  ) {
    this.ring = new Float64Array(cfg.window);
    this.scratch = new Float64Array(cfg.window);
  }

  /** `open` lists the job's open findings, for the probable cause. */
  process(p: MfuPoint, open: () => Finding[]): void {
    // A figure that cannot be true is neither a baseline nor a drop ("fell from 704.9% to 568.8%").
    if (p.implausible) return;
    this.ring[this.count % this.cfg.window] = p.mfu;
    this.count++;
    if (this.count < this.cfg.window) return;
    // 21 values a step: a sort is cheap and gives the median and the fast steps' figure at once.
    this.scratch.set(this.ring);
    this.scratch.sort();
    const w = this.cfg.window;
    const short = this.scratch[w >> 1];
    const fast = this.scratch[Math.floor(0.9 * (w - 1))];
    if (this.id) {
      this.whileOpen(p, short, open);
      return;
    }
    const base = this.baseline;
    const fastBase = this.fastBaseline;
    if (
      base !== undefined &&
      fastBase !== undefined &&
      this.count >= this.cfg.minBaselineSteps &&
      short < base * (1 - this.cfg.margin) &&
      fast < fastBase * (1 - this.cfg.margin / 2)
    ) {
      if (this.below === 0) {
        this.onsetTs = p.ts - p.step_ms;
        this.onsetStep = p.step;
      }
      this.below++;
      if (this.below >= this.cfg.sustainSteps) this.openDrop(p, short, base, open);
      return;
    }
    this.below = 0;
    this.baseline = base === undefined ? short : base + this.cfg.baselineAlpha * (short - base);
    this.fastBaseline = fastBase === undefined ? fast : fastBase + this.cfg.baselineAlpha * (fast - fastBase);
  }

  /** The job restarted: its first steps after the gap start a fresh window (the baseline holds). */
  restart(): void {
    this.count = 0;
    this.below = 0;
  }

  private openDrop(p: MfuPoint, short: number, base: number, open: () => Finding[]): void {
    this.id = findingId('mfu_drop', this.job, undefined, undefined, this.onsetStep);
    this.above = 0;
    this.log.openFinding(this.id, p.ts, this.draft(short, base, open()));
  }

  private whileOpen(p: MfuPoint, short: number, open: () => Finding[]): void {
    const base = this.baseline ?? short;
    if (short >= base * (1 - this.cfg.margin / 2)) this.above++;
    else this.above = 0;
    if (this.above >= this.cfg.resolveSteps) {
      this.log.resolve(this.id!, p.ts, {
        summary: `MFU of job ${this.job} is back to ${mfuText(short)} (baseline ${mfuText(base)}).`,
      });
      this.id = undefined;
      this.below = 0;
      return;
    }
    const prev = this.log.get(this.id!);
    const draft = this.draft(short, base, open());
    // An update when a new cause appears; figures alone move with the lifecycle's own rate limit.
    this.log.update(this.id!, p.ts, draft, (draft.related?.length ?? 0) > (prev?.related?.length ?? 0));
  }

  private draft(short: number, base: number, open: Finding[]) {
    const causes = open
      .filter(
        (f) =>
          f.job === this.job && CAUSE_TYPES.has(f.type) && (f.est_cost_pct ?? 0) >= this.cfg.minCauseCostPct,
      )
      .sort((a, b) => (b.est_cost_pct ?? 0) - (a.est_cost_pct ?? 0));
    const fall = 100 * (1 - short / base);
    const cause = causes[0];
    return {
      type: 'mfu_drop',
      job: this.job,
      host: cause?.host ?? '',
      severity: fall >= 20 ? ('critical' as const) : ('warning' as const),
      onset_ts: this.onsetTs,
      est_cost_pct: costFigure(fall),
      action: 'none' as const,
      related: causes.map((c) => c.id),
      evidence: {
        onset_step: this.onsetStep,
        mfu: round(short, 4),
        baseline_mfu: round(base, 4),
        fall_pct: round(fall, 1),
        probable_cause: cause?.id,
      },
      summary:
        `MFU of job ${this.job} fell ${costText(costFigure(fall))}, from ${mfuText(base)} to ${mfuText(short)}` +
        (cause
          ? // Named, not quoted: the cause's own cost moves on, and its finding is where it is said.
            `; probable cause: the ${cause.type} on ${cause.host}${cause.gpu !== undefined ? `/${cause.gpu}` : ''}${cause.peer_host ? ` ↔ ${cause.peer_host}` : ''} (finding ${cause.id})`
          : '; no open finding with a cost explains it (job-wide: input pipeline, filesystem, network weather).'),
    };
  }
}
