/**
 * Straggler detection asks two questions of each rank's peer-relative log ratio (log compute minus
 * the median of its peers: same job, same step, same pipeline stage).
 *
 * - **Change**: is the rank slower than its own recent past? Each rank keeps its own baseline (its
 *   level and its noise, detectors/straggler/baseline.ts), so a GPU's fixed offset from its peers
 *   (silicon, cooling: same-SKU GPUs differ by several percent) cancels, and scores are in units of
 *   the rank's own noise, not of the stage's spread (which holds every GPU's offset). Sequential
 *   tests on that score open a finding fast: a CUSUM with bounded increments (k, cap, h), a shift
 *   CUSUM for ~4%+ steps, a level CUSUM for small shifts, a periodic test for a rank slow on one
 *   step in N, and an EWMA's drift tests for slow ramps. A job-wide stall moves every peer alike and
 *   cancels; one spike adds at most cap − k and cannot fire.
 * - **Chronic**: is the rank slower than its peers from the start, and does it matter? The step
 *   waits for its slowest rank, so a GPU costs the job only its lead over the next slowest
 *   (detectors/straggler/chronic.ts). Only when replacing it would buy `chronicPct` of the job's
 *   throughput is that a finding; every GPU's level and cost go to the job's slowest-GPUs ranking.
 *
 * A finding stays open while its cause persists: a change resolves only when the rank has come
 * back below half the shift it showed (a CUSUM against that reference, so a rank that stays slow
 * never resolves), a chronic finding when its cost falls below half its threshold. Its baseline is
 * frozen while it is flagged, so the fault never becomes its own reference. Several ranks of one
 * host crossing together (a node-wide power brake) become one host-level finding. Pure: no I/O, no
 * clock; event time comes from the frames. The thresholds and their false-alarm rates are derived
 * in docs/detectors.md.
 */

import { costClause, costFigure, costText } from '../../core/figures.js';
import { round } from '../../core/round.js';
import type { SlowGpu } from '../../schema/output.js';
import { grown } from '../arrays.js';
import type { CusumConfig } from '../cusum.js';
import { type FindingLog, findingId, severityForCost } from '../findings.js';
import { medianInPlace } from '../robust.js';
import type { RankTable, StepFrame } from '../steps.js';
import { LEVEL_BLOCK, LEVEL_VAR, RankBaselines } from './baseline.js';
import { ChronicCost } from './chronic.js';

export interface StragglerConfig extends CusumConfig {
  /** Steps to wait for other ranks of the same host before deciding rank- or host-level. */
  groupWaitSteps: number;
  /** Drift EWMA: weight of the newest step. */
  driftLambda: number;
  /** Drift EWMA: smallest rise (log ratio) its tests judge against. */
  driftMin: number;
  /** Drift EWMA: its tests' threshold is at least this many of its own standard deviations. */
  driftL: number;
  /** Drift EWMA: each step is taken at most this many noise units from the rank's level (a spike barely moves it). */
  driftClip: number;
  /** The rank's level: weight of the newest step after its first 1/driftBaseLambda steps (a running mean before). */
  driftBaseLambda: number;
  /** Relative test: the EWMA this share of its threshold above the rank's own level fires. */
  driftRelative: number;
  /**
   * Ramp test: a rise of the EWMA above its own value driftWindowSteps steps ago (or its first
   * settled value, when that is more recent) by this share of its threshold fires. A ramp that
   * began early in the job drags the level up with it; the EWMA's own past does not move.
   */
  driftWindow: number;
  /** Ramp test: the window, in steps (a multiple of DRIFT_SNAP_EVERY). */
  driftWindowSteps: number;
  /**
   * Periodic test: a step at least this many noise units above the rank's level is a hit;
   * `periodicHits` hits in a row spaced by the same gap of at most `periodicMaxGap` steps fire. A
   * rank slow on one step in three fires at its fourth slow step; random spikes almost never line
   * up (8p^4 per rank-step at spike rate p).
   */
  periodicHit: number;
  periodicHits: number;
  periodicMaxGap: number;
  /**
   * Shift CUSUM beside the main one, for sustained slowdowns of ~3 noise units and more: a larger
   * reference (fastK) and a tight cap (fastCap), so one step adds at most fastCap − fastK and only
   * a run of slow steps reaches fastH.
   */
  fastK: number;
  fastCap: number;
  fastH: number;
  /**
   * Level CUSUM, for small sustained shifts (a 3% slow rank, ~2 noise units): reference levelK plus
   * (levelH + 1.166 − 1/levelK) / n for a level worth n steps (see levelRef), each step's score
   * capped at levelCap so a spike adds at most levelCap − levelK. Fires at levelH.
   */
  levelK: number;
  levelCap: number;
  levelH: number;
  /**
   * Chronic test: a rank whose GPU, replaced by a typical one, would buy the job at least this
   * share of its throughput (percent) opens a finding; below, it is in the slowest-GPUs ranking.
   */
  chronicPct: number;
  /** Chronic test: it resolves below this share of chronicPct (hysteresis). */
  chronicResolve: number;
  /** Chronic cost: weight of the newest step in each GPU's share of the job's time. */
  chronicLambda: number;
  /** Chronic test: steps measured before it may open a finding. */
  chronicMinSteps: number;
  /** Chronic cost: a step counts at most this many noise units above the rank's own level (spikes, rank 0's checkpoints). */
  chronicClip: number;
  /** The slowest-GPUs ranking: emitted every this many steps (and when the job's steps close). */
  rankingEvery: number;
  /** The slowest-GPUs ranking: GPUs per job. */
  rankingSize: number;
}

/** The test that flagged a rank, named in `evidence.trigger`. */
const TRIGGERS = ['cusum', 'shift', 'periodic', 'drift_level', 'drift_ramp', 'level', 'chronic'] as const;
const CHRONIC = TRIGGERS.indexOf('chronic');

/**
 * The level CUSUM's reference for a level worth n steps: levelK plus (b − 1/levelK)/n', b = levelH
 * + 1.166, n' = n / LEVEL_VAR (the level is a mean of blocks' trimmed means). An error e in the level
 * (variance 1/n', noise units) acts as Δ = levelK + e on the reference; Siegmund's rate ≈
 * 2Δ²e^{−2Δb} falls by b − 1/Δ in its log per unit of Δ, so averaged over e it grows by about
 * e^{2(b − 1/k)²/n'}, which (b − 1/k)/n' more on k takes back: a young level is as safe as a settled
 * one, at the price of a few steps (docs/detectors.md, false-alarm design).
 */
function levelRef(n: number, cfg: StragglerConfig): number {
  const nEff = Math.min(n, (2 - cfg.driftBaseLambda) / cfg.driftBaseLambda) / LEVEL_VAR;
  const b = cfg.levelH + 1.166;
  return cfg.levelK + Math.max(0, b - 1 / cfg.levelK) / nEff;
}

/** The ramp test keeps one snapshot of each rank's EWMA every this many steps. */
const DRIFT_SNAP_EVERY = 8;

export const STRAGGLER_DEFAULTS: StragglerConfig = {
  k: 1.5,
  h: 24,
  cap: 8,
  minSigma: 0.006,
  sigmaAlpha: 0.05,
  resolveH: 30,
  groupWaitSteps: 2,
  minPeers: 4,
  driftLambda: 0.08,
  driftMin: 0.03,
  driftL: 8,
  driftClip: 3,
  driftBaseLambda: 0.005,
  driftRelative: 0.8,
  driftWindow: 0.9,
  driftWindowSteps: 128,
  periodicHit: 6,
  periodicHits: 4,
  periodicMaxGap: 8,
  fastK: 2,
  fastCap: 4,
  fastH: 10,
  // 12, not 11.5: with the rank's own noise as the unit and no gate on where the rank sits among its
  // peers, 11.5 crossed ~2.6·10⁻⁹ per rank-step (Monte Carlo, docs/detectors.md), most of the design
  // target; 12 crosses ~1·10⁻⁹, at ~1 step more for a 3% shift (the eval's worst 3% job: 26 steps).
  levelK: 0.75,
  levelCap: 3,
  levelH: 12,
  chronicPct: 5,
  chronicResolve: 0.5,
  chronicLambda: 0.01,
  chronicMinSteps: 8,
  chronicClip: 3,
  rankingEvery: 64,
  rankingSize: 16,
};

interface Pending {
  host: string;
  firstStep: number;
  ranks: number[];
}

interface Incident {
  id: string;
  host: string;
  ranks: number[];
}

export class StragglerDetector {
  private cap = 0;
  /** The change tests' statistics: main, shift and level CUSUMs. */
  private s = new Float64Array(0);
  private fast = new Float64Array(0);
  private level = new Float64Array(0);
  /** The level CUSUM's reference for each rank's level as it now stands (levelRef). */
  private levelK = new Float64Array(0);
  /** Each rank's own baseline: level and noise. */
  private readonly base: RankBaselines;
  /** The rank's own noise where it is clearly above its stage's (else 0): its unit, set at each fold. */
  private ownUnit = new Float64Array(0);
  /** Log compute of each rank this step (computed once, read by both passes). */
  private logs = new Float64Array(0);
  /** The resolve CUSUM, and the capped scores since the rank was flagged (its shift). */
  private clear = new Float64Array(0);
  private flagZ = new Float64Array(0);
  private flagN = new Int32Array(0);
  private onsetStep = new Int32Array(0);
  private onsetTs = new Float64Array(0);
  private sumLog = new Float64Array(0);
  private sumCompute = new Float64Array(0);
  private sumPeer = new Float64Array(0);
  private sumWait = new Float64Array(0);
  private sumPeerWait = new Float64Array(0);
  private sumExcess = new Float64Array(0);
  private stepMsAtOnset = new Float64Array(0);
  private n = new Int32Array(0);
  private flagged = new Uint8Array(0);
  /** Which test flagged each rank (a TRIGGERS index), for the finding's evidence. */
  private trigger = new Uint8Array(0);
  /** EWMA of each rank's log ratio (innovations clipped to driftClip noise units): the drift tests. */
  private ewma = new Float64Array(0);
  /** The ramp test's snapshots of each settled EWMA (slot-major, NaN before), its first, and the frame count. */
  private snaps = new Float32Array(0);
  private firstSnap = new Float64Array(0);
  private frames = 0;
  /** Periodic test: each rank's last hit (frame), the gap before it, and hits at that gap in a row. */
  private lastHit = new Int32Array(0);
  private hitGap = new Int32Array(0);
  private hitRun = new Int32Array(0);
  /** Each stage's noise: the smoothed spread of its ranks' log ratios about their own levels. */
  private stageSigma: number[] = [];
  /** Steps in that mean, and whether most of the stage's ranks had a level when it started. */
  private stageSteps: number[] = [];
  private stageLeveled: boolean[] = [];
  private scratch = new Float64Array(0);
  private scratch2 = new Float64Array(0);
  private stageMedian: number[] = [];
  private stageWaitMedian: number[] = [];
  private cumStepMs = 0;
  /** Each GPU's share of the job's time as the rank it waits for: the chronic question. */
  private readonly chronic: ChronicCost;
  private chronicStartStep = -1;
  private chronicStartTs = 0;
  /** The latest slowest-GPUs ranking not yet handed out, and the last frame seen. */
  private ranking: SlowGpu[] = [];
  private lastStep = -1;
  private lastTs = 0;
  private readonly pending = new Map<string, Pending>();
  /** Baselines by host/GPU, from a restart until the first frame after it. */
  private carried:
    | Map<string, { ewma: number; level: number; n: number; noise: number; blocks: number }>
    | undefined;
  private readonly incidents = new Map<string, Incident>();
  private readonly incidentOfRank = new Map<number, Incident>();

  constructor(
    private readonly job: string,
    private readonly ranks: RankTable,
    private readonly log: FindingLog,
    private readonly cfg: StragglerConfig = STRAGGLER_DEFAULTS,
  ) {
    this.base = new RankBaselines(cfg.driftBaseLambda);
    this.chronic = new ChronicCost(cfg.chronicLambda);
  }

  process(f: StepFrame): void {
    this.ensure(this.ranks.gpu.length);
    if (this.carried) this.takeCarried();
    const { cfg } = this;
    const b = this.base;
    const stepMs = maxPresent(f.stepMs, f.seen, this.ranks.size);
    this.cumStepMs += stepMs;
    const hostTop = this.hostMaxima(f);
    hostTop.stepMs = stepMs;
    // Ramp test: every DRIFT_SNAP_EVERY frames the oldest snapshot is compared, then replaced.
    const slots = Math.max(2, Math.round(cfg.driftWindowSteps / DRIFT_SNAP_EVERY));
    const snapSlot = this.frames % DRIFT_SNAP_EVERY === 0 ? (this.frames / DRIFT_SNAP_EVERY) % slots : -1;
    const refSlot = (Math.floor(this.frames / DRIFT_SNAP_EVERY) + 1) % slots;
    const fold = this.frames % LEVEL_BLOCK === LEVEL_BLOCK - 1;
    this.frames++;
    this.lastStep = f.step;
    this.lastTs = f.ts;
    const lam = cfg.driftLambda;
    const ewSd = Math.sqrt(lam / (2 - lam));
    // The chronic question: the job's slowest rank this step by de-spiked log compute, and the next.
    let top = -1;
    let topLog = Number.NEGATIVE_INFINITY;
    let secondLog = Number.NEGATIVE_INFINITY;
    let topMed = 0;
    let topUnit = 0;

    for (let stage = 0; stage < this.ranks.stageMembers.length; stage++) {
      const members = this.ranks.stageMembers[stage];
      let m = 0;
      let w = 0;
      for (const r of members) {
        if (!f.seen[r] || !(f.compute[r] > 0)) continue;
        const l = Math.log(f.compute[r]);
        this.logs[r] = l;
        this.scratch[m++] = l;
        if (f.commWait[r] >= 0) this.scratch2[w++] = f.commWait[r];
      }
      if (m < cfg.minPeers) continue;
      const med = medianInPlace(this.scratch, m);
      // The stage's noise: the spread of its ranks' log ratios about each one's own level, so the
      // GPUs' offsets are not in it (before levels exist, about the median: offsets included).
      m = 0;
      let withLevel = 0;
      for (const r of members) {
        if (!f.seen[r] || !(f.compute[r] > 0)) continue;
        this.scratch[m++] = Math.abs(this.logs[r] - med - b.level[r]);
        if (b.n[r] > 0) withLevel++;
      }
      const sigma = this.stageNoise(stage, 1.4826 * medianInPlace(this.scratch, m), 2 * withLevel >= m);
      this.stageMedian[stage] = med;
      this.stageWaitMedian[stage] = w > 0 ? medianInPlace(this.scratch2, w) : Number.NaN;
      const pool = Math.max(sigma, cfg.minSigma);
      const peerMs = Math.exp(med);

      for (const r of members) {
        if (!f.seen[r] || !(f.compute[r] > 0)) continue;
        const lr = this.logs[r] - med;
        const unit = Math.max(pool, this.ownUnit[r]);
        const own = b.level[r];
        const z = (lr - own) / unit;
        // The EWMA takes each step at most driftClip units from the rank's level: spikes and a
        // 1-in-3 fault barely move it, and it comes back within ~1/λ steps of a recovery.
        const clip = cfg.driftClip * unit;
        const ew = this.ewma[r] + lam * (Math.min(own + clip, Math.max(own - clip, lr)) - this.ewma[r]);
        this.ewma[r] = ew;
        const driftThr = Math.max(cfg.driftMin, cfg.driftL * unit * ewSd);
        const relThr = cfg.driftRelative * driftThr;
        // The relative tests wait until the EWMA has settled (3/λ steps); the change tests until the
        // rank also has a level of its own.
        const settled = b.seen(r) * lam >= 3;
        const ready = settled && b.n[r] >= LEVEL_BLOCK;
        // A block during which the rank rose well above its level, or was flagged, stays out of it.
        b.add(r, lr, this.flagged[r] === 1 || (settled && ew - own > 0.5 * relThr));
        if (fold) this.foldBaseline(r, pool);
        // Chronic: a step counts at most chronicClip units above the rank's own level, once it has
        // one (its first block's will do: a GPU slow from the start is judged from step 16).
        const hasLevel = b.hasLevel(r);
        const v = med + (hasLevel ? Math.min(lr, this.levelNow(r) + cfg.chronicClip * unit) : lr);
        if (v > topLog) {
          secondLog = topLog;
          topLog = v;
          top = hasLevel ? r : -1;
          topMed = med;
          topUnit = unit;
        } else if (v > secondLog) secondLog = v;
        const oldest = this.snaps[refSlot * this.cap + r];
        const ref = Number.isNaN(oldest) ? this.firstSnap[r] : oldest;
        if (snapSlot >= 0 && settled) {
          this.snaps[snapSlot * this.cap + r] = ew;
          if (Number.isNaN(this.firstSnap[r])) this.firstSnap[r] = ew;
        }
        const before = this.s[r];
        if (!ready) {
          if (!this.flagged[r]) continue;
        } else {
          this.s[r] = Math.max(0, before + Math.min(z, cfg.cap) - cfg.k);
          this.fast[r] = Math.max(0, this.fast[r] + Math.min(z, cfg.fastCap) - cfg.fastK);
          this.level[r] = Math.max(0, this.level[r] + Math.min(z, cfg.levelCap) - this.levelK[r]);
        }
        const after = this.s[r];
        const shifted = this.fast[r] >= cfg.fastH;
        const leveled = this.level[r] >= cfg.levelH;
        // The relative test compares the EWMA with a level that has its own error while young:
        // it fires at relThr, and never within 6 standard deviations of the difference.
        const diffSd = unit * Math.sqrt(ewSd * ewSd + LEVEL_VAR / Math.max(1, b.n[r]));
        const driftRel = ready && ew - own >= Math.max(relThr, 6 * diffSd);
        const drifted = driftRel || (ready && ew - ref >= cfg.driftWindow * driftThr);
        let periodic = false;
        if (ready && z >= cfg.periodicHit) {
          const gap = this.frames - this.lastHit[r];
          if (gap === this.hitGap[r] && gap <= cfg.periodicMaxGap) this.hitRun[r]++;
          else this.hitRun[r] = 2;
          this.hitGap[r] = gap;
          this.lastHit[r] = this.frames;
          periodic = this.hitRun[r] >= cfg.periodicHits;
        }
        if (!this.flagged[r]) {
          if (after === 0 && !drifted && !periodic && !shifted && !leveled) continue;
          if (before === 0) {
            // CUSUM's change-point estimate: the last step the statistic left zero.
            this.onsetStep[r] = f.step;
            this.onsetTs[r] = f.ts - stepMs;
            this.resetSums(r, stepMs);
          }
        }
        this.accumulate(r, f, lr, peerMs, stage, hostTop);
        if (this.flagged[r]) {
          if (this.trigger[r] !== CHRONIC) this.judgeClear(r, z);
        } else if (after >= cfg.h || drifted || periodic || shifted || leveled) {
          this.trigger[r] = after >= cfg.h ? 0 : shifted ? 1 : periodic ? 2 : leveled ? 5 : driftRel ? 3 : 4;
          this.flag(r, f.step);
        }
      }
    }
    this.judgeChronic(f, stepMs, top, topLog, secondLog, topMed, topUnit);
    if (this.frames % cfg.rankingEvery === 0) this.rank();
    this.decidePending(f);
    this.updateIncidents(f);
  }

  /**
   * The stage's noise after this step's spread: smoothed over steps (a running mean for its first
   * 1/sigmaAlpha steps). When most of its ranks first have a level, the spread loses the GPUs'
   * offsets and drops at once: the mean starts afresh rather than taking 1/sigmaAlpha steps to forget.
   */
  private stageNoise(stage: number, spread: number, leveled: boolean): number {
    if (leveled && !this.stageLeveled[stage]) {
      this.stageLeveled[stage] = true;
      this.stageSteps[stage] = 0;
    }
    const n = (this.stageSteps[stage] ?? 0) + 1;
    this.stageSteps[stage] = n;
    const prev = this.stageSigma[stage];
    const w = Math.max(this.cfg.sigmaAlpha, 1 / n);
    const sigma = prev === undefined ? spread : prev + w * (spread - prev);
    this.stageSigma[stage] = sigma;
    return sigma;
  }

  /**
   * The chronic question for this step: what the job would have saved without its slowest rank
   * (its lead over the next, and never below its own stage's median), capped as savedMs caps it.
   * Only the slowest rank's share can rise, so only it is judged: it opens a finding when its share
   * is above chronicPct by two standard errors. A step's saving varies by about the rank's noise
   * (`unit`, a share of its compute, which is most of the step), so the share's standard error is
   * at most 100·unit/√n over the n steps its window holds: a GPU costing 25% opens after
   * chronicMinSteps, one near the threshold only once the estimate has firmed up.
   */
  private judgeChronic(
    f: StepFrame,
    stepMs: number,
    top: number,
    topLog: number,
    secondLog: number,
    topMed: number,
    unit: number,
  ): void {
    if (top < 0) return;
    const peerMs = Math.exp(topMed);
    const saved = Math.min(Math.exp(topLog) - Math.max(Math.exp(secondLog), peerMs), stepMs - peerMs);
    if (this.chronicStartStep < 0) {
      this.chronicStartStep = f.step;
      this.chronicStartTs = f.ts - stepMs;
    }
    this.chronic.step(stepMs, top, saved);
    const { cfg } = this;
    const n = Math.min(this.chronic.steps, (2 - cfg.chronicLambda) / cfg.chronicLambda);
    if (
      this.flagged[top] ||
      n < cfg.chronicMinSteps ||
      this.chronic.sharePct(top) - (200 * unit) / Math.sqrt(n) < cfg.chronicPct
    )
      return;
    this.trigger[top] = CHRONIC;
    this.onsetStep[top] = this.chronicStartStep;
    this.onsetTs[top] = this.chronicStartTs;
    this.resetSums(top, stepMs);
    this.flag(top, f.step);
  }

  /** Flags a rank (its finding opens once its host's other ranks have had their say). */
  private flag(r: number, step: number): void {
    this.flagged[r] = 1;
    this.clear[r] = 0;
    this.flagZ[r] = 0;
    this.flagN[r] = 0;
    const host = this.ranks.host[r];
    const p = this.pending.get(host) ?? { host, firstStep: step, ranks: [] };
    this.pending.set(host, p);
    p.ranks.push(r);
  }

  /**
   * The resolve CUSUM of a changed rank: its reference is half the shift it has shown since it was
   * flagged (the mean capped score), so while it stays as slow it loses at least half the shift per
   * step on average and never resolves; back at its level, it gains the reference per step. The
   * reference is at most k, so even a large fault needs resolveH / k steps of health (20) to resolve.
   */
  private judgeClear(r: number, z: number): void {
    const { cfg } = this;
    const zc = Math.min(z, cfg.cap);
    this.flagZ[r] += zc;
    this.flagN[r]++;
    const ref = Math.min(cfg.k, Math.max(cfg.levelK, (0.5 * this.flagZ[r]) / this.flagN[r]));
    this.clear[r] = Math.max(0, this.clear[r] + ref - zc);
  }

  /**
   * Where the rank runs now against its peers (log ratio): its level, or for a changed rank (its
   * level frozen at what it was before) its mean since the change.
   */
  private levelNow(r: number): number {
    return this.flagged[r] && this.trigger[r] !== CHRONIC && this.n[r] > 0
      ? this.sumLog[r] / this.n[r]
      : this.base.level[r];
  }

  /** Folds a rank's pending block into its baseline, and resets what depends on it. */
  private foldBaseline(r: number, pool: number): void {
    const first = this.base.fold(r);
    // The EWMA starts at the rank's first block's mean, not at its peers' (0): a GPU slow from
    // its first step is not a ramp.
    if (!Number.isNaN(first)) this.ewma[r] = first;
    this.levelK[r] = levelRef(this.base.n[r], this.cfg);
    this.ownUnit[r] = this.base.ownNoiseAbove(r, pool);
  }

  /**
   * The slowest-GPUs ranking: the GPUs with a level of their own, by cost (what replacing each
   * would buy the job), then by how much slower than its stage peers each runs now (levelNow).
   */
  private rank(): void {
    const { cfg } = this;
    const b = this.base;
    const top: number[] = [];
    const keys: number[] = [];
    const levels: number[] = [];
    for (let r = 0; r < this.ranks.size && r < this.cap; r++) {
      if (b.n[r] < LEVEL_BLOCK) continue;
      // Costs within 0.1 point are alike: a GPU that led the job on a few noisy steps is not ranked
      // above a much slower one.
      const key = round(this.chronic.sharePct(r), 1);
      const level = this.levelNow(r);
      // Insertion into a short sorted list: one pass over the ranks.
      let i = top.length;
      while (i > 0 && (keys[i - 1] < key || (keys[i - 1] === key && levels[i - 1] < level))) i--;
      if (i >= cfg.rankingSize) continue;
      top.splice(i, 0, r);
      keys.splice(i, 0, key);
      levels.splice(i, 0, level);
      if (top.length > cfg.rankingSize) {
        top.pop();
        keys.pop();
        levels.pop();
      }
    }
    this.ranking = top.map((r, i) => {
      const cost = this.chronic.sharePct(r);
      return {
        job: this.job,
        ts: this.lastTs,
        step: this.lastStep,
        rank: r,
        host: this.ranks.host[r],
        gpu: this.ranks.gpu[r],
        stage: this.ranks.stage[r],
        slowdown_pct: round(100 * (Math.exp(levels[i]) - 1), 2),
        cost_pct: round(cost, 2),
        gpu_hours_per_day: round((cost / 100) * this.ranks.size * 24, 1),
        steps: b.n[r],
      };
    });
  }

  /** Hands out the slowest-GPUs ranking computed since the last call (none when there is none new). */
  takeRanking(out: SlowGpu[]): void {
    for (const row of this.ranking) out.push(row);
    this.ranking = [];
  }

  /** The job's steps closed (end of input, or of the job): its ranking as it stands. */
  flush(): void {
    if (this.lastStep >= 0) this.rank();
  }

  /** Max compute per host this step, and the top two hosts, for the cost estimate. */
  private hostMaxima(f: StepFrame): HostMaxima {
    const byHost = new Map<string, number>();
    // The two slowest ranks overall: on a one-host job, "everyone else" is the other ranks.
    let topRank = -1;
    let topRankMs = 0;
    let secondRankMs = 0;
    // Ranks of a host are mostly adjacent: a run of them is one map update, not one per rank.
    let runHost: string | undefined;
    let runMax = 0;
    for (let r = 0; r < this.ranks.size; r++) {
      if (!f.seen[r]) continue;
      const h = this.ranks.host[r];
      const c = f.compute[r];
      if (h !== runHost) {
        if (runHost !== undefined) raiseTo(byHost, runHost, runMax);
        runHost = h;
        runMax = c;
      } else if (c > runMax) runMax = c;
      if (c > topRankMs) {
        secondRankMs = topRankMs;
        topRankMs = c;
        topRank = r;
      } else if (c > secondRankMs) secondRankMs = c;
    }
    if (runHost !== undefined) raiseTo(byHost, runHost, runMax);
    let top: string | undefined;
    let topMs = 0;
    let secondMs = 0;
    for (const [h, c] of byHost) {
      if (c > topMs) {
        secondMs = topMs;
        topMs = c;
        top = h;
      } else if (c > secondMs) secondMs = c;
    }
    return { top, topMs, secondMs, hosts: byHost.size, topRank, topRankMs, secondRankMs, stepMs: 0 };
  }

  /** After a restart: each rank takes the baseline of the GPU it now runs on, if the job had it. */
  private takeCarried(): void {
    const carried = this.carried!;
    this.carried = undefined;
    for (let r = 0; r < this.cap && r < this.ranks.gpu.length; r++) {
      const c = carried.get(`${this.ranks.host[r]}/${this.ranks.gpu[r]}`);
      if (!c) continue;
      this.ewma[r] = c.ewma;
      this.base.set(r, c.level, c.n, c.noise, c.blocks);
      this.levelK[r] = levelRef(c.n, this.cfg);
      const sigma = this.stageSigma[this.ranks.stage[r]];
      this.ownUnit[r] = this.base.ownNoiseAbove(r, Math.max(sigma ?? 0, this.cfg.minSigma));
    }
  }

  /** Starts the since-onset sums at the current step (whose wall time is already in cumStepMs). */
  private resetSums(r: number, stepMs: number): void {
    this.n[r] = 0;
    this.sumLog[r] = 0;
    this.sumCompute[r] = 0;
    this.sumPeer[r] = 0;
    this.sumWait[r] = 0;
    this.sumPeerWait[r] = 0;
    this.sumExcess[r] = 0;
    this.stepMsAtOnset[r] = this.cumStepMs - stepMs;
  }

  private accumulate(
    r: number,
    f: StepFrame,
    lr: number,
    peerMs: number,
    stage: number,
    hostTop: HostMaxima,
  ): void {
    this.n[r]++;
    this.sumLog[r] += lr;
    this.sumCompute[r] += f.compute[r];
    this.sumPeer[r] += peerMs;
    if (f.commWait[r] >= 0) this.sumWait[r] += f.commWait[r];
    const pw = this.stageWaitMedian[stage];
    if (pw >= 0) this.sumPeerWait[r] += pw;
    this.sumExcess[r] += savedMs(r, this.ranks.host[r], f.compute[r], peerMs, hostTop);
  }

  /** Share of the wall time since onset the job would have saved: in [0, 100) (see savedMs). */
  private costPct(r: number): number {
    const span = this.cumStepMs - this.stepMsAtOnset[r];
    return span > 0 ? Math.min(MAX_COST_PCT, (100 * this.sumExcess[r]) / span) : 0;
  }

  private decidePending(f: StepFrame): void {
    for (const [host, p] of this.pending) {
      const onHost = this.ranks.ranksOnHost.get(host) ?? 1;
      const hostWide = p.ranks.length >= Math.max(2, Math.ceil(onHost / 2));
      if (
        f.step - p.firstStep < this.cfg.groupWaitSteps &&
        !(hostWide && p.ranks.length >= onHost) &&
        !this.hostQuiet(host, p.ranks)
      )
        continue;
      this.pending.delete(host);
      const existing = [...this.incidents.values()].find((i) => i.host === host && i.ranks.length > 1);
      if (existing) {
        for (const r of p.ranks) this.join(existing, r);
      } else if (hostWide) {
        this.openIncident(host, p.ranks, f);
      } else {
        for (const r of p.ranks) this.openIncident(host, [r], f);
      }
    }
  }

  /**
   * Whether no other rank of the host can cross within the wait: each is unflagged and further
   * from h than groupWaitSteps steps of the largest increment. Then waiting would change nothing.
   */
  private hostQuiet(host: string, ranks: number[]): boolean {
    const reach = this.cfg.h - this.cfg.groupWaitSteps * (this.cfg.cap - this.cfg.k);
    for (let r = 0; r < this.ranks.size; r++) {
      if (this.ranks.host[r] !== host || ranks.includes(r)) continue;
      if (this.flagged[r] || this.s[r] > reach) return false;
    }
    return true;
  }

  private join(inc: Incident, r: number): void {
    if (!inc.ranks.includes(r)) inc.ranks.push(r);
    this.incidentOfRank.set(r, inc);
  }

  private openIncident(host: string, ranks: number[], f: StepFrame): void {
    const lead = ranks.reduce((a, b) => (this.onsetStep[a] <= this.onsetStep[b] ? a : b));
    const single = ranks.length === 1;
    const id = findingId(
      'straggler',
      this.job,
      host,
      single ? this.ranks.gpu[lead] : undefined,
      this.onsetStep[lead],
    );
    const inc: Incident = { id, host, ranks: [] };
    for (const r of ranks) this.join(inc, r);
    this.incidents.set(id, inc);
    this.log.openFinding(id, f.ts, this.draft(inc));
  }

  private draft(inc: Incident) {
    const rs = inc.ranks;
    const cost = (r: number) => (this.trigger[r] === CHRONIC ? this.chronic.sharePct(r) : this.costPct(r));
    const lead = rs.reduce((a, b) => (cost(a) >= cost(b) ? a : b));
    const single = rs.length === 1;
    const chronic = this.trigger[lead] === CHRONIC;
    const windowed = this.n[lead] > 0;
    const n = Math.max(1, this.n[lead]);
    const slowdown = 100 * (Math.exp(this.sumLog[lead] / n) - 1);
    const total = Math.min(MAX_COST_PCT, Math.max(...rs.map(cost)));
    const compute = this.sumCompute[lead] / n;
    const peer = this.sumPeer[lead] / n;
    const wait = this.sumWait[lead] / n;
    const peerWait = this.sumPeerWait[lead] / n;
    const gpu = single ? this.ranks.gpu[lead] : undefined;
    const where = single ? `rank ${lead} on ${inc.host}/${gpu}` : `${rs.length} ranks on ${inc.host}`;
    // How far the rank is from its own level, where that level differs from its peers'.
    const own = this.base.level[lead];
    const change = 100 * (Math.exp(this.sumLog[lead] / n - own) - 1);
    const past = Math.abs(own) >= 0.01 ? `${round(change, 1)}% slower than its own past; ` : '';
    const figures =
      `(${past}${round(compute, 0)} vs ${round(peer, 0)} ms, waits ${round(wait, 0)} vs ${round(peerWait, 0)} ms in collectives)` +
      ` and ${costClause(total)}.`;
    const summary = chronic
      ? `${where} has computed ${round(100 * (Math.exp(own) - 1), 1)}% slower than its stage peers from the start ` +
        `and is the rank the job waits for: replacing its GPU would buy ~${costText(costFigure(total))} of the job's throughput.`
      : `${where} computes ${round(slowdown, 1)}% slower than its stage peers ${figures}`;
    return {
      type: 'straggler',
      job: this.job,
      host: inc.host,
      gpu,
      rank: single ? lead : undefined,
      severity: severityForCost(total),
      onset_ts: Math.min(...rs.map((r) => this.onsetTs[r])),
      est_cost_pct: costFigure(total),
      action: total >= 2 ? ('cordon' as const) : ('watch' as const),
      evidence: {
        onset_step: Math.min(...rs.map((r) => this.onsetStep[r])),
        // A chronic rank has no change window: its slowdown is its own level, and the window's
        // figures (all zero) are left out rather than shown as if measured.
        slowdown_pct: round(windowed ? slowdown : 100 * (Math.exp(own) - 1), 1),
        ...(windowed && {
          compute_ms: round(compute, 1),
          peer_median_compute_ms: round(peer, 1),
          comm_wait_ms: round(wait, 1),
          peer_median_comm_wait_ms: round(peerWait, 1),
          steps: this.n[lead],
          cusum: round(this.s[lead], 1),
        }),
        stage: this.ranks.stage[lead],
        trigger: TRIGGERS[this.trigger[lead]],
        // The rank's own level against its peers' median before the change, and the change itself.
        own_level_pct: round(100 * (Math.exp(own) - 1), 2),
        change_pct: round(change, 2),
        drift_pct: round(100 * (Math.exp(this.ewma[lead]) - 1), 2),
        ranks: rs.slice().sort((a, b) => a - b),
        gpu_hours_per_day: round((total / 100) * this.ranks.size * 24, 1),
      },
      summary,
    };
  }

  private updateIncidents(f: StepFrame): void {
    const { cfg } = this;
    for (const [id, inc] of this.incidents) {
      const healthy = (r: number) =>
        this.trigger[r] === CHRONIC
          ? this.chronic.sharePct(r) < cfg.chronicResolve * cfg.chronicPct
          : this.clear[r] >= cfg.resolveH;
      if (inc.ranks.every(healthy)) {
        this.log.resolve(id, f.ts, { summary: `${inc.host}: compute back in line with stage peers.` });
        this.incidents.delete(id);
        for (const r of inc.ranks) {
          // Back at its level: the EWMA, held high through the fault, starts from there again.
          this.ewma[r] = this.base.level[r];
          this.flagged[r] = 0;
          this.s[r] = 0;
          this.fast[r] = 0;
          this.level[r] = 0;
          this.clear[r] = 0;
          this.incidentOfRank.delete(r);
        }
      } else {
        this.log.update(id, f.ts, this.draft(inc));
      }
    }
  }

  /**
   * The job restarted (perhaps on other hosts, its ranks renumbered). A rank's baseline (its level,
   * noise and EWMA) belongs to the GPU it ran on: they are kept by host and GPU, and the first frame
   * after the restart gives each rank those of the GPU it now runs on, so a GPU the job ran on
   * before keeps its settled level (a slow bin of silicon stays known, and the change tests stay
   * armed); a GPU new to the job starts afresh. Which rank the job waits for starts afresh too.
   */
  restart(): void {
    this.carried = new Map();
    const b = this.base;
    for (let r = 0; r < this.cap && r < this.ranks.gpu.length; r++) {
      if (b.n[r] === 0) continue;
      this.carried.set(`${this.ranks.host[r]}/${this.ranks.gpu[r]}`, {
        ewma: this.ewma[r],
        level: b.level[r],
        n: b.n[r],
        noise: b.noise[r],
        blocks: b.blocks(r),
      });
    }
    this.ewma.fill(0);
    this.level.fill(0);
    this.ownUnit.fill(0);
    b.clear();
    this.snaps.fill(Number.NaN);
    this.firstSnap.fill(Number.NaN);
    this.chronic.reset();
    this.chronicStartStep = -1;
    // Levels start afresh but for the GPUs carried: the stages' noise is measured afresh too.
    this.stageLeveled = [];
  }

  /** Open incidents, for linking and the end-of-job summary. */
  openIncidents(): { id: string; host: string; ranks: number[] }[] {
    return [...this.incidents.values()];
  }

  private ensure(capacity: number): void {
    if (capacity <= this.cap) return;
    this.s = grown(this.s, capacity);
    this.fast = grown(this.fast, capacity);
    this.level = grown(this.level, capacity);
    this.levelK = grown(this.levelK, capacity);
    this.ownUnit = grown(this.ownUnit, capacity);
    this.logs = grown(this.logs, capacity);
    this.clear = grown(this.clear, capacity);
    this.flagZ = grown(this.flagZ, capacity);
    this.flagN = grown(this.flagN, capacity);
    this.onsetTs = grown(this.onsetTs, capacity);
    this.sumLog = grown(this.sumLog, capacity);
    this.sumCompute = grown(this.sumCompute, capacity);
    this.sumPeer = grown(this.sumPeer, capacity);
    this.sumWait = grown(this.sumWait, capacity);
    this.sumPeerWait = grown(this.sumPeerWait, capacity);
    this.sumExcess = grown(this.sumExcess, capacity);
    this.stepMsAtOnset = grown(this.stepMsAtOnset, capacity);
    this.onsetStep = grown(this.onsetStep, capacity);
    this.n = grown(this.n, capacity);
    this.flagged = grown(this.flagged, capacity);
    this.trigger = grown(this.trigger, capacity);
    this.ewma = grown(this.ewma, capacity);
    this.base.ensure(capacity);
    this.chronic.ensure(capacity);
    // A first hit has no gap yet (far from any frame).
    this.lastHit = grown(this.lastHit, capacity, -1e9);
    this.hitGap = grown(this.hitGap, capacity);
    this.hitRun = grown(this.hitRun, capacity);
    const slots = Math.max(2, Math.round(this.cfg.driftWindowSteps / DRIFT_SNAP_EVERY));
    const snaps = new Float32Array(slots * capacity).fill(Number.NaN);
    for (let k = 0; k < slots; k++)
      snaps.set(this.snaps.subarray(k * this.cap, (k + 1) * this.cap), k * capacity);
    this.snaps = snaps;
    this.firstSnap = grown(this.firstSnap, capacity, Number.NaN);
    this.scratch = new Float64Array(capacity);
    this.scratch2 = new Float64Array(capacity);
    this.cap = capacity;
  }
}

/** Per-step figures the cost estimate needs: the slowest hosts and ranks, and the wall step time. */
export interface HostMaxima {
  top: string | undefined;
  topMs: number;
  secondMs: number;
  hosts: number;
  topRank: number;
  topRankMs: number;
  secondRankMs: number;
  stepMs: number;
}

/** Rounded to 2 decimals, a cost just under 100 must not read 100. */
const MAX_COST_PCT = 99.99;

/**
 * What one step would have been shorter had rank r computed like its stage peers: the job waits
 * for its slowest rank, so without the culprit it waits for the slowest of everyone else (other
 * hosts, so that a host-wide slowdown is not measured against itself; the other ranks when the
 * job has one host) or for the culprit running at its peers' median, whichever is later. Never
 * negative, and never the whole step: the step without the culprit still takes its peers' time.
 */
export function savedMs(r: number, host: string, computeMs: number, peerMs: number, m: HostMaxima): number {
  const others =
    m.hosts > 1 ? (host === m.top ? m.secondMs : m.topMs) : r === m.topRank ? m.secondRankMs : m.topRankMs;
  const saved = computeMs - Math.max(others, peerMs);
  if (!(saved > 0)) return 0;
  return Math.min(saved, Math.max(0, m.stepMs - peerMs));
}

function maxPresent(a: Float64Array, seen: Uint8Array, n: number): number {
  let m = 0;
  for (let i = 0; i < n; i++) if (seen[i] && a[i] > m) m = a[i];
  return m;
}

/**
 * Raises a host's maximum to `ms`. A function of the module, not a closure made per call: a new
 * closure is a new call target, which deoptimizes its caller on each of a big job's few steps.
 */
function raiseTo(byHost: Map<string, number>, host: string, ms: number): void {
  const cur = byHost.get(host);
  if (cur === undefined || ms > cur) byHost.set(host, ms);
}
