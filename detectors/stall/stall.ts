/**
 * Recurring stalls: a rank that holds the job up for seconds every few dozen steps (a data loader
 * refilling, a host process waking), while its stage peers run on. Each stall is one step, so the
 * straggler's CUSUMs, built for sustained or short-period slowdowns, let it decay between stalls;
 * this detector looks at the stall steps alone and asks whether they recur with a steady period.
 *
 * Per step: a reference per pipeline stage (the median compute and comm wait of up to `sampleSize`
 * of its ranks, so the cost per rank is a few compares), then one pass over the ranks for those at
 * least `minStallMs` (and `minStallShare` of the stage's compute) behind it, in their own compute
 * (the stall was inside their timed step) or in their peers' wait for them (outside it). Only
 * those few go on to the periodicity test (runs.ts). A stall shared by every rank moves the
 * reference with it and is no one's; a step where many ranks stall is the job's. A rank's stall on
 * or next to the step of its own checkpoint save (rank 0 writing inside its step), or of one that
 * names no rank, may be the checkpoint: hits wait `delayFrames` steps for `checkpoint` events, and
 * those explained never start or grow a run. The false-alarm design is in docs/detectors.md.
 * Pure: no I/O, no clock.
 */

import { costClause, costFigure } from '../../core/figures.js';
import { round } from '../../core/round.js';
import type { CheckpointEvent } from '../../schema/events.js';
import { grown } from '../arrays.js';
import { type FindingLog, findingId, severityForCost } from '../findings.js';
import { medianInPlace } from '../robust.js';
import type { RankTable, StepFrame } from '../steps.js';
import { type StallHit, StallRun, type StallRunConfig } from './runs.js';

export interface StallConfig extends StallRunConfig {
  /** A stall: the rank at least this far (ms) behind its stage's median... */
  minStallMs: number;
  /** ...and at least this share of the median's compute behind it. */
  minStallShare: number;
  /** A finding resolves after this many periods without a stall. */
  resolvePeriods: number;
  /** Steps a stall waits for a checkpoint event that explains it before it is judged. */
  delayFrames: number;
  /** More than this share of the ranks (and more than 16) stalling in one step: the job's stall, no rank's. */
  maxStalledShare: number;
  /** Fewer ranks than this in a stage this step: not judged. */
  minPeers: number;
  /** Ranks of a stage sampled for its reference. */
  sampleSize: number;
}

export const STALL_DEFAULTS: StallConfig = {
  minStallMs: 2000,
  minStallShare: 0.5,
  minGap: 9,
  maxGap: 128,
  tolerance: 0.25,
  hits: 5,
  maxMissed: 2,
  resolvePeriods: 3,
  delayFrames: 2,
  maxStalledShare: 0.02,
  minPeers: 4,
  sampleSize: 63,
};

/** Checkpoints that name no rank, remembered, most recent last: enough for the stalls waiting on them. */
const CHECKPOINTS_KEPT = 16;
/** A rank with no checkpoint seen. */
const NO_CHECKPOINT = -1e9;
/** Runs that can no longer continue are dropped every this many steps. */
const EVICT_EVERY = 64;

interface Pending {
  rank: number;
  hit: StallHit;
}

interface Incident {
  id: string;
  host: string;
  /** Its GPU when it names one rank. */
  gpu: number | undefined;
  ranks: number[];
}

export class RecurringStallDetector {
  private frames = 0;
  private wallMs = 0;
  private readonly runs = new Map<number, StallRun>();
  private pending: Pending[] = [];
  /** Steps of recent checkpoints that name no rank (all ranks'), and each rank's latest own one. */
  private readonly checkpoints: number[] = [];
  private rankCheckpoint = new Int32Array(0);
  private readonly incidents = new Map<string, Incident>();
  private readonly incidentOf = new Map<number, Incident>();
  private medCompute: number[] = [];
  private medWait: number[] = [];
  private threshold: number[] = [];
  private sample = new Float64Array(0);
  private readonly stalled: number[] = [];
  private readonly slowest = new TopOfOtherHosts();
  private readonly waitedFor = new TopOfOtherHosts();

  constructor(
    private readonly job: string,
    private readonly ranks: RankTable,
    private readonly log: FindingLog,
    private readonly cfg: StallConfig = STALL_DEFAULTS,
  ) {}

  /** A closed step: find the ranks that stalled in it, then judge the stalls that waited long enough. */
  process(f: StepFrame, stepMs: number): void {
    this.frames++;
    this.wallMs += stepMs;
    this.screen(f, stepMs);
    this.judge(this.frames - this.cfg.delayFrames, f.ts);
    this.resolveStopped(f.ts);
    if (this.frames % EVICT_EVERY === 0) this.evict();
  }

  /** A checkpoint save (or load): its rank's stalls on or next to its step (every rank's, when it names none) may be its own. */
  checkpoint(e: CheckpointEvent): void {
    if (e.rank !== undefined) {
      if (e.rank >= this.rankCheckpoint.length)
        this.rankCheckpoint = grown(
          this.rankCheckpoint,
          Math.max(e.rank + 1, 2 * this.rankCheckpoint.length),
          NO_CHECKPOINT,
        );
      this.rankCheckpoint[e.rank] = Math.max(this.rankCheckpoint[e.rank], e.step);
      return;
    }
    if (this.checkpoints.includes(e.step)) return;
    this.checkpoints.push(e.step);
    if (this.checkpoints.length > CHECKPOINTS_KEPT) this.checkpoints.shift();
  }

  /** End of input or of the job: judge what still waits. */
  flush(ts: number): void {
    this.judge(Number.POSITIVE_INFINITY, ts);
  }

  /**
   * The job restarted: stalls around it are the restart's, and a rank's run does not span it. An
   * open finding goes on (its rank keeps its period) until its stalls stop or its rank turns up on
   * another host.
   */
  restart(): void {
    this.pending = [];
    for (const [r, run] of this.runs) if (!run.flagged) this.runs.delete(r);
  }

  private screen(f: StepFrame, stepMs: number): void {
    const { cfg, ranks } = this;
    const stages = ranks.stageMembers.length;
    for (let s = 0; s < stages; s++) this.reference(f, s);
    // The slowest compute and the largest lead in peers' wait, on two different hosts: what the
    // step would have taken without a stalled rank is set by the slowest rank elsewhere.
    const slowest = this.slowest.reset();
    const waitedFor = this.waitedFor.reset();
    const stalled = this.stalled;
    stalled.length = 0;
    let seen = 0;
    for (let r = 0; r < ranks.size; r++) {
      if (!f.seen[r]) continue;
      seen++;
      const s = ranks.stage[r];
      const med = this.medCompute[s];
      if (!(med > 0)) continue;
      const c = f.compute[r];
      const host = ranks.host[r];
      slowest.offer(c, host);
      const lead = this.medWait[s] - f.commWait[r];
      waitedFor.offer(lead, host);
      if (c - med >= this.threshold[s] || lead >= this.threshold[s]) stalled.push(r);
    }
    // Many ranks at once is the job's stall (a filesystem, a job-wide pause), no rank's.
    if (stalled.length === 0 || stalled.length > Math.max(16, cfg.maxStalledShare * seen)) return;
    for (const r of stalled) {
      const s = ranks.stage[r];
      const host = ranks.host[r];
      const med = this.medCompute[s];
      const inCompute = f.compute[r] - med;
      const inWait = this.medWait[s] - f.commWait[r];
      const savedCompute = f.compute[r] - Math.max(slowest.elsewhere(host), med);
      const savedWait = inWait - waitedFor.elsewhere(host);
      // Its own compute when that shows the stall (inside its timed step); else its peers' wait for
      // it (outside). The wait figures are NaN where a rank sent no comm_wait_ms: never Math.max'ed.
      const byWait = !(inCompute >= this.threshold[s]);
      this.pending.push({
        rank: r,
        hit: {
          frame: this.frames,
          step: f.step,
          ts: Math.round(f.ts - stepMs),
          stallMs: byWait ? inWait : inCompute,
          savedMs: Math.max(0, savedCompute, Number.isNaN(savedWait) ? 0 : savedWait),
          wallMs: this.wallMs,
          inCompute: !byWait,
          excused: false,
        },
      });
    }
  }

  /** Stage s's reference: the median compute and comm wait of a sample of its ranks this step. */
  private reference(f: StepFrame, s: number): void {
    const members = this.ranks.stageMembers[s];
    const { sampleSize, minPeers, minStallMs, minStallShare } = this.cfg;
    if (this.sample.length < sampleSize) this.sample = new Float64Array(sampleSize);
    const stride = Math.max(1, Math.ceil(members.length / sampleSize));
    let n = 0;
    for (let i = 0; i < members.length && n < sampleSize; i += stride) {
      const r = members[i];
      if (f.seen[r] && f.compute[r] > 0) this.sample[n++] = f.compute[r];
    }
    const med = n >= minPeers ? medianInPlace(this.sample, n) : Number.NaN;
    this.medCompute[s] = med;
    this.threshold[s] = Math.max(minStallMs, minStallShare * med);
    let w = 0;
    for (let i = 0; i < members.length && w < sampleSize; i += stride) {
      const r = members[i];
      if (f.seen[r] && f.commWait[r] >= 0) this.sample[w++] = f.commWait[r];
    }
    this.medWait[s] = w >= minPeers ? medianInPlace(this.sample, w) : Number.NaN;
  }

  /** Stalls from frames up to `through`, each excused or not by the checkpoints seen since. */
  private judge(through: number, ts: number): void {
    let done = 0;
    const fired: number[] = [];
    for (const { rank, hit } of this.pending) {
      if (hit.frame > through) break;
      done++;
      const own = rank < this.rankCheckpoint.length ? this.rankCheckpoint[rank] : NO_CHECKPOINT;
      hit.excused =
        Math.abs(hit.step - own) <= 1 || this.checkpoints.some((c) => Math.abs(hit.step - c) <= 1);
      let run = this.runs.get(rank);
      if (!run) {
        if (hit.excused) continue;
        run = new StallRun(hit);
        this.runs.set(rank, run);
        continue;
      }
      const counted = run.add(hit, this.cfg);
      if (!counted) continue;
      if (run.flagged) {
        const inc = this.incidentOf.get(rank);
        if (inc) this.log.update(inc.id, ts, this.draft(inc));
      } else if (run.hits >= this.cfg.hits) {
        run.flagged = true;
        fired.push(rank);
      }
    }
    if (done > 0) this.pending.splice(0, done);
    if (fired.length > 0) this.open(fired, ts);
  }

  /** Ranks of one host that fire together are one host-level finding. */
  private open(fired: number[], ts: number): void {
    const byHost = new Map<string, number[]>();
    for (const r of fired) {
      const host = this.ranks.host[r];
      byHost.set(host, [...(byHost.get(host) ?? []), r]);
    }
    for (const [host, rs] of byHost) {
      const lead = rs[0];
      const single = rs.length === 1;
      const id = findingId(
        'recurring_stall',
        this.job,
        host,
        single ? this.ranks.gpu[lead] : undefined,
        this.runs.get(lead)!.first.step,
      );
      const inc: Incident = { id, host, gpu: single ? this.ranks.gpu[lead] : undefined, ranks: rs };
      this.incidents.set(id, inc);
      for (const r of rs) this.incidentOf.set(r, inc);
      this.log.openFinding(id, ts, this.draft(inc));
    }
  }

  /**
   * Resolves a finding whose stalls stopped (three periods without one), or whose rank an elastic
   * restart moved to another host: its stalls there, if they go on, are judged afresh.
   */
  private resolveStopped(ts: number): void {
    const { resolvePeriods, tolerance } = this.cfg;
    for (const [id, inc] of this.incidents) {
      const moved = inc.ranks.find((r) => this.ranks.host[r] !== inc.host);
      const quiet = inc.ranks.every((r) => {
        const run = this.runs.get(r)!;
        return this.frames - run.last.frame > (resolvePeriods + tolerance) * run.period();
      });
      if (!quiet && moved === undefined) continue;
      const lead = this.runs.get(inc.ranks[0])!;
      const draft = this.draft(inc);
      this.log.resolve(id, ts, {
        summary:
          moved === undefined
            ? `${this.where(inc)}: no stall for ${this.frames - lead.last.frame} steps (${resolvePeriods} periods): the recurring stall stopped.`
            : `${this.where(inc)}: rank ${moved} now runs on ${this.ranks.host[moved]} (the job restarted); its stalls there are judged afresh.`,
        evidence: {
          ...draft.evidence,
          resolved_reason: moved === undefined ? 'stalls_stopped' : 'rank_moved',
        },
      });
      this.incidents.delete(id);
      for (const r of inc.ranks) {
        this.incidentOf.delete(r);
        this.runs.delete(r);
      }
    }
  }

  /** Drops runs that no stall can continue any more. */
  private evict(): void {
    const horizon = this.cfg.maxGap * (1 + this.cfg.tolerance);
    for (const [r, run] of this.runs)
      if (!run.flagged && this.frames - run.last.frame > horizon) this.runs.delete(r);
  }

  private where(inc: Incident): string {
    const r = inc.ranks[0];
    return inc.gpu !== undefined
      ? `rank ${r} on ${inc.host}/${inc.gpu}`
      : `${inc.ranks.length} ranks on ${inc.host}`;
  }

  private draft(inc: Incident) {
    const runs = inc.ranks.map((r) => this.runs.get(r)!);
    const run = runs.reduce((a, b) => (b.costPct() > a.costPct() ? b : a));
    const lead = inc.ranks[runs.indexOf(run)];
    const single = inc.ranks.length === 1;
    const cost = run.costPct();
    const period = run.period();
    const periodS = run.periodMs() / 1000;
    const stallS = run.stallSum / Math.max(1, run.hits) / 1000;
    const min = run.stallMin / 1000;
    const max = run.stallMax / 1000;
    const together = single ? 'while its stage peers run on' : 'together, while the rest of the job runs on';
    return {
      type: 'recurring_stall',
      job: this.job,
      host: inc.host,
      gpu: inc.gpu,
      rank: single ? lead : undefined,
      severity: severityForCost(cost),
      onset_ts: Math.min(...runs.map((x) => x.first.ts)),
      est_cost_pct: costFigure(cost),
      // A data loader or a host process, not the GPU: nothing to cordon for.
      action: 'watch' as const,
      evidence: {
        period_steps: round(period, 1),
        period_s: round(periodS, 1),
        stall_s: round(stallS, 2),
        stall_s_min: round(min, 2),
        stall_s_max: round(max, 2),
        stalls: run.hits,
        first_stall_step: run.first.step,
        last_stall_step: run.last.step,
        // compute: inside the rank's timed step; comm_wait: outside it, seen as its peers' wait.
        seen_in: 2 * run.inCompute >= run.hits ? 'compute' : 'comm_wait',
        stage: this.ranks.stage[lead],
        ranks: inc.ranks.slice().sort((a, b) => a - b),
        gpu_hours_per_day: round((cost / 100) * this.ranks.size * 24, 1),
      },
      summary:
        `${this.where(inc)} stalls ${round(stallS, 1)} s (${round(min, 1)}–${round(max, 1)} s) every ` +
        `~${round(period, 0)} steps (~${round(periodS, 0)} s), ${run.hits} times so far, ${together}: ` +
        `it ${costClause(cost)}. A data loader or another process on the host is the usual cause.`,
    };
  }
}

/** The largest figure of a step, and the largest on any other host than its own (NaN never counts). */
class TopOfOtherHosts {
  private best = 0;
  private second = 0;
  private host: string | undefined;

  reset(): this {
    this.best = 0;
    this.second = 0;
    this.host = undefined;
    return this;
  }

  offer(x: number, host: string): void {
    if (!(x > this.second)) return;
    if (x > this.best) {
      if (host !== this.host) this.second = this.best;
      this.best = x;
      this.host = host;
    } else if (host !== this.host) this.second = x;
  }

  /** The largest figure on a host other than `host` (0 when none). */
  elsewhere(host: string): number {
    return host === this.host ? this.second : this.best;
  }
}
