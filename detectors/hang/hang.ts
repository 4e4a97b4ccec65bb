/**
 * Hangs, named by the rank that caused them, within a minute of the stall: long before the NCCL
 * watchdog gives up (10 minutes by default).
 *
 * When a job stops making progress (no step and no collective for `stallFloorMs`, and at least
 * `stallSteps` of its step times) while event time goes on (its peers' GPU samples, other jobs),
 * the rank that hung is the one the live signs agree on (./signals.ts): its GPU went idle while
 * its peers' GPUs spin in NCCL, its reports stopped first, its sequence numbers are behind its
 * communicator peers'. NCCL RAS (missing, unresponsive, dead, behind) and Flight Recorder
 * (never joined) name it outright. Later, the watchdog timeouts of the peers that waited for it
 * are evidence on its finding: it is the rank absent from them. One `nccl_hang` per job and hang,
 * on the culprit's host and GPU; a job-wide pause (every GPU idle, or no sign that singles out a
 * few ranks) opens nothing, and the job moving on, restarting or finishing resolves it.
 *
 * `nccl_desync` (action none): ranks of one process group called different collectives at one
 * SeqNum (watchdog timeouts), or Flight Recorder found a size, type or dtype mismatch: a bug in the
 * job's code, never a reason to cordon. It names the rank that diverged.
 *
 * Pure: events in, findings out through the FindingLog; event time only.
 */
import type {
  CollectiveEvent,
  FaultEvent,
  GpuEvent,
  JobLifecycleEvent,
  StepEvent,
} from '../../schema/events.js';
import type { Action } from '../../schema/finding.js';
import { type FindingLog, findingId } from '../findings.js';
import { IDLE, JobProgress } from './progress.js';
import { CODE_BUG, notJoinedCulprits, RAS_CULPRIT, type Report, reportBrief, toReport } from './reports.js';
import { behindPeers, idleWhilePeersBusy, stoppedFirst, stuckIn, suspectLimit } from './signals.js';
import { brief, type Desync, JobTimeouts, type Timeout, toTimeout, who } from './watchdog.js';

export interface HangConfig {
  /** A job with no step and no collective for this long... */
  stallFloorMs: number;
  /** ...and for this many of its typical step times is stalled. */
  stallSteps: number;
  /** Watchdog timeouts are judged together this long (event time) after the first one came. */
  settleMs: number;
  /** A RAS "behind" whose operation count has not moved for this long is a rank stuck behind. */
  rasConfirmMs: number;
  /** A sign names at most this many suspects (or 1% of the job's ranks) to single them out. */
  maxSuspects: number;
  /** Communicator-operations whose sequence numbers are tracked per job (at most 65,535); more are counted and left out. */
  maxComms: number;
  /** A job with no event at all for this long is forgotten (its open hang resolved). */
  forgetAfterMs: number;
}

export const HANG_DEFAULTS: HangConfig = {
  stallFloorMs: 30_000,
  stallSteps: 5,
  settleMs: 10_000,
  rasConfirmMs: 10_000,
  maxSuspects: 8,
  maxComms: 65_535,
  forgetAfterMs: 3_600_000,
};

type Owner = (host: string, gpu: number) => { job: string; rank: number } | undefined;

interface Culprit {
  /** The one rank, when one is singled out. */
  rank?: number;
  host: string;
  gpu?: number;
  /** Every suspect, most supported first. */
  ranks: number[];
  signals: string[];
}

interface Incident {
  id: string;
  culprit: Culprit;
  /** The job's highest step (steps or collectives) and the event time when it opened. */
  stallStep: number;
  openedTs: number;
  onset: number;
  /** Evidence changed since the last refresh (timeouts, reports). */
  dirty: boolean;
  /** When the first watchdog timeout came while it was open, and whether the settled timeouts were told. */
  timeoutsFrom?: number;
  timeoutsTold: boolean;
  related?: string;
}

interface JobHang {
  progress: JobProgress;
  timeouts: JobTimeouts;
  /** First timeout not yet judged (watchdog-only hangs wait `settleMs` for the others). */
  pendingSince?: number;
  reports: Report[];
  /** Flight Recorder's "not all ranks joining" blocks, and when the report's first came (judged whole, once event time passes it). */
  frBlocks: Map<string, Report>;
  frPendingTs?: number;
  /** RAS and Flight Recorder culprits by global rank, and by host where no rank was given. */
  named: Map<number, Set<string>>;
  namedHosts: Map<string, { gpu?: number; kinds: Set<string> }>;
  rasBehind: Map<string, { ops: number | undefined; ts: number }>;
  incident?: Incident;
  /** When a stalled job with no culprit is looked at again, and the stall (its last progress) last looked at. */
  nextLook: number;
  lookedAt: number;
  desyncs: Set<string>;
  codeBug?: string;
  /** The last hang's id: a second one at the same step is named by its onset. */
  lastHangId?: string;
  /** When the job is next judged on its own clock (`advanceJob`). */
  nextOwnSweep: number;
}

const SWEEP_MS = 1_000;
const MAX_REPORTS = 64;
const MAX_FR_BLOCKS = 1024;

export class HangDetector {
  private readonly jobs = new Map<string, JobHang>();
  private nextSweep = 0;
  /** Jobs with a Flight Recorder report whose blocks may still be coming: judged at the next other event. */
  private readonly frPending = new Set<string>();
  /** A job's own clock, where it has one (`judgeBy`). */
  private clockOf?: (job: string) => number | undefined;

  constructor(
    private readonly log: FindingLog,
    private readonly ownerOf: Owner,
    private readonly cfg: HangConfig = HANG_DEFAULTS,
  ) {}

  step(e: StepEvent): void {
    this.judgeReports(e.ts);
    this.job(e.job).progress.step(e.rank, e.host, e.gpu, e.step, e.ts);
  }

  collective(e: CollectiveEvent): void {
    const { seq, window } = e as { seq?: unknown; window?: unknown };
    const n = typeof seq === 'number' && Number.isFinite(seq) ? seq : undefined;
    this.judgeReports(e.ts);
    this.job(e.job).progress.collective(e, n, window);
  }

  /** GPU samples count only for jobs already seen (steps, collectives, faults). */
  gpu(e: GpuEvent): void {
    this.judgeReports(e.ts);
    let { job, rank } = e;
    if (job === undefined || rank === undefined) {
      const o = this.ownerOf(e.host, e.gpu);
      job ??= o?.job;
      rank ??= o?.rank;
    }
    if (job === undefined || rank === undefined) return;
    this.jobs.get(job)?.progress.gpuSample(rank, e);
  }

  fault(e: FaultEvent): void {
    const t = toTimeout(e);
    const r = t ? undefined : toReport(e);
    if (!(r?.source === 'flight_recorder' && r.kind === 'not_joined')) this.judgeReports(e.ts);
    if (t) this.timeout(e.job ?? '', t);
    else if (r) this.report(r);
  }

  /** Event time moved on: stalls, settled timeouts, jobs that moved on or went away. */
  advance(now: number): void {
    // Called before each event is handed over: only a report older than it is surely whole.
    this.judgeReports(now, true);
    if (now < this.nextSweep) return;
    this.nextSweep = now + SWEEP_MS;
    for (const [key, j] of this.jobs) {
      const own = this.clockOf?.(key);
      this.sweep(key, j, own !== undefined && own < now ? own : now);
    }
  }

  /**
   * Event time of one job moved on (what the shards saw of it came up to `now`): that job is
   * judged at its own time, once a second of it, whatever the stream's clock says.
   */
  advanceJob(job: string, now: number): void {
    const j = this.jobs.get(job);
    if (!j || now < j.nextOwnSweep) return;
    j.nextOwnSweep = now + SWEEP_MS;
    this.sweep(job, j, now);
  }

  /**
   * Jobs judged no later than their own clock says (the sharded layout's job stage: as far as the
   * shards' signs of the job came), so a job whose signs lag is not judged on what is not in yet.
   */
  judgeBy(clockOf: (job: string) => number | undefined): void {
    this.clockOf = clockOf;
  }

  /** End of input: Flight Recorder reports and timeouts still waiting are judged now. */
  flush(ts: number): void {
    this.judgeReports(ts);
    for (const [key, j] of this.jobs) if (j.pendingSince !== undefined) this.settle(key, j, ts);
  }

  /** A restart or finish ends what the hang opened. */
  jobChanged(e: JobLifecycleEvent): void {
    this.judgeReports(e.ts);
    if (e.event !== 'restart' && e.event !== 'finished') return;
    const j = this.jobs.get(e.job);
    if (!j) return;
    // Timeouts that came before it are judged first: the hang happened.
    if (j.pendingSince !== undefined) this.settle(e.job, j, e.ts);
    this.jobs.delete(e.job);
    const summary = `job ${e.job} ${e.event === 'finished' ? 'finished' : 'restarted'} after its hang.`;
    const reason = e.event === 'finished' ? 'job_finished' : 'job_restarted';
    if (j.incident) this.resolve(j, e.ts, summary, reason);
    for (const id of j.desyncs) this.log.resolve(id, e.ts, { summary });
  }

  /** Another process carries the job on: its open findings are dropped here, not resolved. */
  forgetJob(job: string): void {
    const j = this.jobs.get(job);
    if (!j) return;
    if (j.incident) this.log.forget(j.incident.id);
    for (const id of j.desyncs) this.log.forget(id);
    this.jobs.delete(job);
  }

  /**
   * A job's progress, for what a shard saw of it (detectors/hang/shard-signs.ts); made if new when
   * `make` (what a shard saw of its collectives makes a job known, as a collective does).
   */
  progressOf(job: string, make: boolean): JobProgress | undefined {
    return (make ? this.job(job) : this.jobs.get(job))?.progress;
  }

  private job(key: string): JobHang {
    let j = this.jobs.get(key);
    if (!j) {
      j = {
        progress: new JobProgress(this.cfg.maxComms),
        timeouts: new JobTimeouts(),
        reports: [],
        frBlocks: new Map(),
        named: new Map(),
        namedHosts: new Map(),
        rasBehind: new Map(),
        nextLook: 0,
        lookedAt: 0,
        desyncs: new Set(),
        nextOwnSweep: 0,
      };
      this.jobs.set(key, j);
    }
    return j;
  }

  private stallMs(p: JobProgress): number {
    return Math.max(this.cfg.stallFloorMs, this.cfg.stallSteps * p.typicalMs);
  }

  /** Stalled: it had made progress, and none came for the stall time. */
  private stalled(p: JobProgress, now: number): boolean {
    const progressed = p.stepsSeen >= 2 || p.hasSeqs;
    return progressed && now - p.maxTs >= this.stallMs(p);
  }

  private sweep(key: string, j: JobHang, now: number): void {
    const p = j.progress;
    if (j.pendingSince !== undefined && now >= j.pendingSince + this.cfg.settleMs) this.settle(key, j, now);
    const inc = j.incident;
    if (inc) {
      // Moved on: a later step, or (a job reporting by interval, no steps) progress after it opened.
      if (p.frontStep > inc.stallStep || (p.stepsSeen === 0 && p.maxTs > inc.openedTs)) {
        const to = p.frontStep > inc.stallStep ? ` to step ${p.frontStep}` : '';
        this.resolve(j, now, `job ${key} moved on${to}: it stalled but did not hang.`, 'resumed');
        // What was said about that stall says nothing about the next one.
        j.timeouts = new JobTimeouts();
        j.reports = [];
        j.frBlocks.clear();
        j.named.clear();
        j.namedHosts.clear();
        j.rasBehind.clear();
      } else if (
        !inc.timeoutsTold &&
        inc.timeoutsFrom !== undefined &&
        now >= inc.timeoutsFrom + this.cfg.settleMs
      ) {
        // The peers' timeouts, once settled, are worth an update of their own.
        inc.timeoutsTold = true;
        this.refresh(key, j, now, true);
      } else if (inc.dirty) this.refresh(key, j, now, false);
    } else if (
      j.pendingSince === undefined &&
      this.stalled(p, now) &&
      (now >= j.nextLook || j.lookedAt !== p.maxTs)
    ) {
      // Looked at less often the longer one stall lasts with no one to name (an ended job).
      j.lookedAt = p.maxTs;
      j.nextLook = now + Math.max(SWEEP_MS, (now - p.maxTs) / 10);
      const c = this.culprit(j, now);
      // A stall alone opens only on one rank, or ranks of one host: the rest is a job-wide pause.
      if (c && (c.rank !== undefined || c.ranks.every((r) => p.host[r] === c.host)))
        this.open(key, j, c, now, 'stall');
    }
    if (now - Math.max(p.lastEventTs, p.maxTs) > this.cfg.forgetAfterMs) {
      if (j.incident)
        this.resolve(j, now, `job ${key}: nothing heard for an hour after its hang.`, 'no_events');
      this.jobs.delete(key);
    }
  }

  private timeout(key: string, t: Timeout): void {
    const j = this.job(key);
    j.progress.touch(t.ts);
    const d = j.timeouts.add(t);
    if (d) this.desync(key, j, d, t.ts);
    if (j.incident) {
      j.incident.dirty = true;
      j.incident.timeoutsFrom ??= t.ts;
    } else j.pendingSince ??= t.ts;
  }

  /** Timeouts settled with no hang open: named by what all the signs say, or by the first that timed out. */
  private settle(key: string, j: JobHang, now: number): void {
    j.pendingSince = undefined;
    if (j.incident) return;
    this.open(key, j, this.culprit(j, now) ?? this.behindByHost(j) ?? this.firstTimedOut(j), now, 'timeouts');
  }

  private report(r: Report): void {
    const owner = r.gpu !== undefined ? this.ownerOf(r.host, r.gpu) : this.ownerOnHost(r.host);
    const key = r.job ?? owner?.job ?? '';
    const j = this.job(key);
    j.progress.touch(r.ts);
    const rank = r.rank ?? (r.gpu !== undefined ? owner?.rank : undefined);
    const report = rank === r.rank ? r : { ...r, rank };
    if (j.reports.length < MAX_REPORTS) j.reports.push(report);
    if (r.source === 'flight_recorder' && CODE_BUG.has(r.kind)) {
      this.codeBug(key, j, report);
      return;
    }
    const kind = `${r.source === 'nccl_ras' ? 'ras' : 'fr'}_${r.kind}`;
    if (r.source === 'flight_recorder' && r.kind === 'not_joined' && r.missing) {
      // One block of a report that names ranks stuck behind the culprit too: judged whole
      // (notJoinedCulprits) once event time passes the report's.
      const block = [r.pg, r.pgName, r.seq, r.op, r.missing.join(',')].join('|');
      if (j.frBlocks.size < MAX_FR_BLOCKS) j.frBlocks.set(block, report);
      j.frPendingTs ??= r.ts;
      this.frPending.add(key);
      return;
    }
    const names = r.kind === 'not_joined' || this.namesCulprit(j, r, rank);
    const culprits = names && rank !== undefined ? [rank] : [];
    // A report placed on no rank and only on the collector's host names no host either.
    if (names && culprits.length === 0 && !r.hostUnknown) {
      const h = j.namedHosts.get(r.host) ?? { gpu: r.gpu, kinds: new Set<string>() };
      h.kinds.add(kind);
      if (j.namedHosts.size < 64) j.namedHosts.set(r.host, h);
    }
    for (const c of culprits) {
      if (j.named.size >= 1024 && !j.named.has(c)) break;
      j.named.set(c, (j.named.get(c) ?? new Set<string>()).add(kind));
    }
    if (j.incident) {
      j.incident.dirty = true;
      return;
    }
    if (j.named.size === 0 && j.namedHosts.size === 0) return;
    const c = this.culprit(j, r.ts) ?? this.reportedHost(j);
    if (c) this.open(key, j, c, r.ts, 'report');
  }

  /**
   * Flight Recorder reports whose blocks are all in (a source sends a report's blocks together,
   * so any other event, or the clock moving, ends them), at event time `now` (the latest report's
   * time when it is later).
   */
  private judgeReports(now: number, olderOnly = false): void {
    if (this.frPending.size === 0) return;
    for (const key of this.frPending) {
      const j = this.jobs.get(key);
      if (j?.frPendingTs !== undefined && olderOnly && now <= j.frPendingTs) continue;
      this.frPending.delete(key);
      if (j?.frPendingTs !== undefined) this.judgeNotJoined(key, j, Math.max(now, j.frPendingTs));
    }
  }

  /** A Flight Recorder report's blocks, all in: the ranks it blames are named. */
  private judgeNotJoined(key: string, j: JobHang, now: number): void {
    j.frPendingTs = undefined;
    for (const c of notJoinedCulprits(j.frBlocks.values())) {
      if (j.named.size >= 1024 && !j.named.has(c)) break;
      j.named.set(c, (j.named.get(c) ?? new Set<string>()).add('fr_not_joined'));
    }
    if (j.incident) {
      j.incident.dirty = true;
      return;
    }
    const c = this.culprit(j, now) ?? this.reportedHost(j);
    if (c) this.open(key, j, c, now, 'report');
  }

  /** Whether a report singles out its rank (or host) as the culprit now. */
  private namesCulprit(j: JobHang, r: Report, rank: number | undefined): boolean {
    if (r.source === 'flight_recorder') return r.kind === 'state_mismatch' || r.kind === 'other';
    if (RAS_CULPRIT.has(r.kind)) return true;
    if (r.kind !== 'behind') return false;
    // Launch counts differ for a moment in a healthy job: behind counts once it stays behind.
    if (this.stalled(j.progress, r.ts)) return true;
    const key = `${rank ?? `${r.host}/${r.gpu ?? '*'}`}|${r.comm ?? ''}`;
    const prev = j.rasBehind.get(key);
    if (prev && prev.ops === r.ops) return r.ts - prev.ts >= this.cfg.rasConfirmMs;
    if (j.rasBehind.size < 1024) j.rasBehind.set(key, { ops: r.ops, ts: r.ts });
    return false;
  }

  private ownerOnHost(host: string): { job: string; rank: number } | undefined {
    for (let g = 0; g < 16; g++) {
      const o = this.ownerOf(host, g);
      if (o) return o;
    }
    return undefined;
  }

  /**
   * The suspects every available sign agrees on, the strongest first: what RAS and Flight
   * Recorder named, an idle or silent GPU among busy peers (stalled jobs), the ranks absent from
   * the watchdog timeouts, the rank behind in a process group, sequence numbers behind, reports
   * that stopped first. A weaker sign that disagrees with the stronger ones is left out.
   */
  private culprit(j: JobHang, now: number): Culprit | undefined {
    const p = j.progress;
    const limit = suspectLimit(p.size, this.cfg.maxSuspects);
    const signs: [string, number[]][] = [['reported', [...j.named.keys()]]];
    if (this.stalled(p, now)) {
      const gpus = idleWhilePeersBusy(p, now, p.maxTs, limit);
      signs.push(['gpu_idle', gpus.ranks], ['gpu_silent', gpus.silent]);
    }
    signs.push(['missing_from_timeouts', this.missingFromTimeouts(j, limit)]);
    const behindPg = j.timeouts.behind()?.t.rank;
    signs.push(['behind_in_process_group', behindPg !== undefined ? [behindPg] : []]);
    if (this.stalled(p, now)) {
      signs.push(['seq_behind', [...behindPeers(p).keys()]]);
      signs.push(['stopped_first', stoppedFirst(p)]);
    }
    const sets = signs
      .filter(([, ranks]) => ranks.length > 0)
      .map(([name, ranks]) => [name, new Set(ranks)] as const);
    let suspects: Set<number> | undefined;
    for (const [, set] of sets) {
      if (!suspects) suspects = set;
      else {
        const both = [...set].filter((r) => suspects!.has(r));
        if (both.length) suspects = new Set(both);
      }
    }
    if (!suspects) return undefined;
    const support = (r: number) => sets.filter(([, set]) => set.has(r)).map(([name]) => name);
    const count = new Map([...suspects].map((r) => [r, support(r).length]));
    const ranks = [...suspects].sort((a, b) => count.get(b)! - count.get(a)! || a - b);
    const top = ranks[0];
    const named = j.named.get(top);
    const signals = support(top).flatMap((s) => (s === 'reported' && named ? [...named] : [s]));
    const at = this.whereIs(j, top);
    if (!at) return undefined;
    const one = ranks.length === 1;
    return {
      ...(one ? { rank: top } : {}),
      host: at.host,
      ...(one && at.gpu !== undefined ? { gpu: at.gpu } : {}),
      ranks,
      signals,
    };
  }

  /** Where a rank runs: from its own reports, else from a timeout or a RAS or Flight Recorder report naming it. */
  private whereIs(j: JobHang, rank: number): { host: string; gpu?: number } | undefined {
    const p = j.progress;
    if (p.known(rank)) return { host: p.host[rank], ...(p.gpu[rank] >= 0 ? { gpu: p.gpu[rank] } : {}) };
    const t = j.timeouts.kept.find((x) => x.rank === rank);
    if (t) return { host: t.host };
    const r = j.reports.find((x) => x.rank === rank) ?? j.reports[0];
    return r && { host: r.host, ...(r.rank === rank && r.gpu !== undefined ? { gpu: r.gpu } : {}) };
  }

  /** The rank behind in a process group, known only by its host and group rank (no global rank printed). */
  private behindByHost(j: JobHang): Culprit | undefined {
    const b = j.timeouts.behind();
    return b && { host: b.t.host, ranks: [], signals: ['behind_in_process_group'] };
  }

  /** Known ranks that did not time out, once at least half the known ranks did. */
  private missingFromTimeouts(j: JobHang, limit: number): number[] {
    const p = j.progress;
    const t = j.timeouts;
    if (t.ranks.size === 0) return [];
    let known = 0;
    const missing: number[] = [];
    for (let r = 0; r < p.size; r++) {
      if (!p.known(r)) continue;
      known++;
      if (!t.ranks.has(r) && missing.length <= limit) missing.push(r);
    }
    return known >= 2 && t.ranks.size >= known / 2 && missing.length <= limit ? missing : [];
  }

  /** A host RAS or Flight Recorder named without a rank. */
  private reportedHost(j: JobHang): Culprit | undefined {
    const first = j.namedHosts.entries().next().value;
    if (!first) return undefined;
    const [host, h] = first;
    return { host, ...(h.gpu !== undefined ? { gpu: h.gpu } : {}), ranks: [], signals: [...h.kinds] };
  }

  /** No sign singles anyone out: the first rank that timed out, said as such. */
  private firstTimedOut(j: JobHang): Culprit {
    const f = j.timeouts.first!;
    return { host: f.host, ...(f.rank !== undefined ? { rank: f.rank } : {}), ranks: [], signals: [] };
  }

  private open(
    key: string,
    j: JobHang,
    c: Culprit,
    now: number,
    trigger: 'stall' | 'timeouts' | 'report',
  ): void {
    const p = j.progress;
    const r = c.rank;
    const idleFrom = r !== undefined && p.known(r) && p.gpuState[r] === IDLE ? p.idleSince[r] : Number.NaN;
    const lastHeard = r !== undefined && p.known(r) && p.lastTs[r] > 0 ? p.lastTs[r] : p.maxTs;
    const first = j.timeouts.first;
    const onset =
      trigger === 'timeouts' && first
        ? first.ts - (first.ranMs ?? 0)
        : Math.max(0, idleFrom > lastHeard ? idleFrom : lastHeard || now);
    // Named by the job's last step before the stall (its number, and when it first came), not by
    // the onset: step events reach every layout whole, while the onset's sources (GPU samples, each
    // rank's collectives) stay in the shards of the sharded layout, so replay and its job stage
    // give one hang one id. By the onset when the job reports no steps, or the step names the
    // previous hang already (it moved on by collectives alone).
    const byStep =
      p.stepsSeen > 0 ? findingId('nccl_hang', key || undefined, c.host, 'step', p.maxStep, p.maxStepTs) : '';
    const id =
      byStep && byStep !== j.lastHangId ? byStep : findingId('nccl_hang', key || undefined, c.host, onset);
    j.lastHangId = id;
    j.incident = {
      id,
      culprit: c,
      stallStep: p.frontStep,
      openedTs: now,
      onset,
      dirty: false,
      timeoutsTold: j.timeouts.count > 0,
    };
    this.log.openFinding(id, now, {
      type: 'nccl_hang',
      ...(key ? { job: key } : {}),
      host: c.host,
      ...(c.gpu !== undefined ? { gpu: c.gpu } : {}),
      ...(c.rank !== undefined ? { rank: c.rank } : {}),
      severity: 'critical',
      onset_ts: onset,
      est_cost_pct: 100,
      action: this.action(j, c),
      evidence: this.evidence(j, now),
      summary: this.summary(key, j, now),
      ...(j.codeBug ? { related: [j.codeBug] } : {}),
    });
    if (j.codeBug) j.incident.related = j.codeBug;
  }

  private action(j: JobHang, c: Culprit): Action {
    return j.codeBug || c.signals.length === 0 ? 'none' : 'watch';
  }

  /** Evidence moved (timeouts came, RAS or Flight Recorder spoke): the finding says so. */
  private refresh(key: string, j: JobHang, now: number, force: boolean): void {
    const inc = j.incident!;
    inc.dirty = false;
    // New signs that name the same culprit (its absence from the timeouts) join its finding.
    const again = this.culprit(j, now);
    if (again?.rank !== undefined && again.rank === inc.culprit.rank)
      inc.culprit.signals = [...new Set([...inc.culprit.signals, ...again.signals])];
    const patch = {
      evidence: this.evidence(j, now),
      summary: this.summary(key, j, now),
      action: this.action(j, inc.culprit),
      ...(inc.related ? { related: [inc.related] } : {}),
    };
    this.log.update(inc.id, now, patch, force);
  }

  private resolve(j: JobHang, ts: number, summary: string, reason: string): void {
    const inc = j.incident!;
    const evidence = { ...this.evidence(j, ts), resolved_reason: reason };
    j.incident = undefined;
    this.log.resolve(inc.id, ts, { summary, evidence });
  }

  private evidence(j: JobHang, now: number): Record<string, unknown> {
    const p = j.progress;
    const inc = j.incident;
    const c = inc?.culprit;
    const r = c?.rank;
    const t = j.timeouts;
    const ev: Record<string, unknown> = {
      culprit: c?.signals.length
        ? { host: c.host, ...(r !== undefined ? { rank: r } : {}), gpu: c.gpu }
        : 'unknown',
      signals: c?.signals ?? [],
      stalled_s: Math.round((now - (p.maxTs || now)) / 1000),
      last_step: p.maxStep >= 0 ? p.maxStep : undefined,
    };
    if (c && c.ranks.length > 1) ev.suspects = c.ranks.slice(0, 16);
    if (r !== undefined && p.known(r)) {
      ev.rank_last_step = p.lastStep[r] >= 0 ? p.lastStep[r] : undefined;
      ev.rank_last_report_ts = p.lastTs[r] || undefined;
      if (p.gpuTs[r] > 0) {
        const limit = suspectLimit(p.size, this.cfg.maxSuspects);
        const g = idleWhilePeersBusy(p, now, p.maxTs, limit);
        ev.gpu = {
          idle: p.gpuState[r] === IDLE,
          ...(p.gpuState[r] === IDLE ? { idle_since_ts: p.idleSince[r] } : {}),
          util_pct: nan(p.util[r]),
          power_w: nan(p.power[r]),
          peers_sampled: g.sampled,
          peers_busy: g.busy,
        };
      }
      const behind = behindPeers(p).get(r);
      if (behind?.length) ev.seq_behind = behind;
      const stuck = stuckIn(p, r);
      if (stuck.length) ev.stuck_in = stuck;
    }
    if (t.count > 0) {
      const wait = t.firstWait();
      ev.timeouts = {
        timed_out: t.count,
        hosts: t.hosts.size,
        first: brief(t.first!),
        ...(wait ? { waited_in: wait } : {}),
        ...(r !== undefined ? { culprit_timed_out: t.ranks.has(r) } : {}),
        missing: this.missingFromTimeouts(j, 16).slice(0, 16),
        ...(t.first!.timeoutMs !== undefined ? { timeout_ms: t.first!.timeoutMs } : {}),
      };
    }
    if (j.reports.length) ev.reports = j.reports.slice(0, 16).map(reportBrief);
    const pgReport = j.reports.find((x) => x.pg !== undefined || x.comm !== undefined);
    if (pgReport) ev.pg = pgReport.pg ?? pgReport.comm;
    if (j.codeBug) ev.code_bug = true;
    return ev;
  }

  private summary(key: string, j: JobHang, now: number): string {
    const p = j.progress;
    const c = j.incident!.culprit;
    const job = key ? `job ${key}` : c.host;
    const stalled = p.maxTs > 0 ? ` Stalled ${Math.round((now - p.maxTs) / 1000)} s.` : '';
    if (c.signals.length === 0) {
      const f = j.timeouts.first!;
      return `${job} hung: ${j.timeouts.count} rank(s) on ${j.timeouts.hosts.size} host(s) timed out in NCCL collectives (first ${who(f)} on ${f.host} in ${f.op}, SeqNum ${f.seq}${f.pg !== undefined ? `, process group ${f.pg}` : ''}). No rank could be singled out as the culprit.`;
    }
    const where =
      c.rank !== undefined
        ? `rank ${c.rank} (${c.host}${c.gpu !== undefined ? ` GPU ${c.gpu}` : ''})`
        : c.ranks.length
          ? `${c.host} (ranks ${c.ranks.slice(0, 8).join(', ')})`
          : c.host;
    const stuck = this.stuckText(j);
    const step =
      c.rank !== undefined && p.known(c.rank) && p.lastStep[c.rank] >= 0
        ? ` after step ${p.lastStep[c.rank]}`
        : '';
    const bug = j.codeBug
      ? ' Flight Recorder found a collective mismatch: a bug in the job’s code, not the hardware.'
      : '';
    return `${job} hung: ${where} stopped${step} while its peers wait for it${stuck} (${c.signals.map(signalText).join('; ')}).${stalled}${bug}`;
  }

  /** The collective the peers wait in: what the timeouts, Flight Recorder or sequence numbers say. */
  private stuckText(j: JobHang): string {
    const r = j.incident!.culprit.rank;
    const fr = [...j.frBlocks.values()].find((b) => r === undefined || b.missing?.includes(r));
    const group = (pg?: string, name?: string) =>
      pg !== undefined ? ` of process group ${pg}${name ? ` (${name})` : ''}` : '';
    if (fr)
      return ` in ${fr.op ?? 'a collective'}${group(fr.pg, fr.pgName)}${fr.seq !== undefined ? ` (seq ${fr.seq})` : ''}`;
    // RAS names the communicator it found the rank behind in (or in error).
    const ras = j.reports.find((x) => x.source === 'nccl_ras' && x.comm !== undefined && x.rank === r);
    if (ras) return ` on communicator ${ras.comm}`;
    const w = j.timeouts.firstWait();
    if (w) return ` in ${w.op}${group(w.pg, w.pg_name)} (SeqNum ${w.seq})`;
    if (r === undefined) return '';
    const stuck = stuckIn(j.progress, r);
    if (stuck.length === 1)
      return ` in ${stuck[0].op} on communicator ${stuck[0].comm} (seq ${stuck[0].next_seq})`;
    return stuck.length > 1 ? ` on communicator ${stuck.map((s) => s.comm).join(' or ')}` : '';
  }

  private desync(key: string, j: JobHang, d: Desync, ts: number): void {
    const id = findingId('nccl_desync', key || undefined, d.pg, d.seq);
    const ops = Object.fromEntries([...d.ops].map(([op, xs]) => [op, xs.slice(0, 64).map(brief)]));
    const evidence = {
      pg: d.pg,
      ...(d.pgName ? { pg_name: d.pgName } : {}),
      pg_known: true,
      seq: d.seq,
      ops,
    };
    if (j.desyncs.has(id)) {
      this.log.update(id, ts, { evidence });
      return;
    }
    j.desyncs.add(id);
    const listing = [...d.ops]
      .map(
        ([op, xs]) =>
          `${xs.slice(0, 8).map(who).join(', ')}${xs.length > 8 ? ` and ${xs.length - 8} more` : ''} in ${op}`,
      )
      .join('; ');
    this.log.openFinding(id, ts, {
      type: 'nccl_desync',
      ...(key ? { job: key } : {}),
      host: d.odd.host,
      ...(d.odd.rank !== undefined ? { rank: d.odd.rank } : {}),
      severity: 'critical',
      onset_ts: d.first.ts,
      action: 'none',
      evidence,
      summary: `Ranks called different collectives at SeqNum ${d.seq} (process group ${d.pg}): ${listing}. ${who(d.odd)} diverged: the code paths differ, this is not a slow link or the hardware.`,
    });
  }

  /** Flight Recorder's size, type or dtype mismatch: a code bug, named on the rank that diverged. */
  private codeBug(key: string, j: JobHang, r: Report): void {
    const id = findingId('nccl_desync', key || undefined, r.pg ?? r.comm, r.seq, r.kind);
    if (!j.desyncs.has(id)) {
      j.desyncs.add(id);
      const p = j.progress;
      const known = r.rank !== undefined && p.known(r.rank);
      const host = known ? p.host[r.rank!] : r.host;
      const gpu = known && p.gpu[r.rank!] >= 0 ? p.gpu[r.rank!] : r.gpu;
      const what = r.kind.replace('_mismatch', '');
      this.log.openFinding(id, r.ts, {
        type: 'nccl_desync',
        ...(key ? { job: key } : {}),
        host,
        ...(gpu !== undefined ? { gpu } : {}),
        ...(r.rank !== undefined ? { rank: r.rank } : {}),
        severity: 'critical',
        onset_ts: r.ts,
        action: 'none',
        evidence: { ...reportBrief(r), code_bug: true, mismatch: what },
        summary: `${key ? `job ${key}: ` : ''}${r.rank !== undefined ? `rank ${r.rank}` : host} called ${r.op ?? 'a collective'} with a different ${what === 'type' ? 'collective type' : what} than its peers${r.pg !== undefined ? ` in process group ${r.pg}` : ''}${r.seq !== undefined ? ` (seq ${r.seq})` : ''}${r.errorType ? ` (${r.errorType})` : ''}: a bug in the job's code, not the hardware. Fix the code; do not cordon.`,
      });
    }
    j.codeBug = id;
    if (j.incident) {
      j.incident.related = id;
      j.incident.dirty = true;
    }
  }
}

function signalText(s: string): string {
  const texts: Record<string, string> = {
    gpu_idle: 'its GPU idle while its peers spin in NCCL',
    gpu_silent: 'its GPU samples stopped while its peers spin in NCCL',
    stopped_first: 'its reports stopped first',
    seq_behind: 'its sequence numbers behind its communicator peers',
    missing_from_timeouts: "absent from its peers' watchdog timeouts",
    behind_in_process_group: 'its last completed SeqNum behind its process group',
    ras_missing: 'NCCL RAS: missing',
    ras_unresponsive: 'NCCL RAS: unresponsive',
    ras_dead: 'NCCL RAS: dead',
    ras_behind: 'NCCL RAS: launched fewer operations than its peers',
    ras_comm_error: 'NCCL RAS: communicator error',
    fr_not_joined: 'Flight Recorder: never joined',
    fr_state_mismatch: 'Flight Recorder: collective state mismatch',
    fr_other: 'Flight Recorder',
  };
  return texts[s] ?? s;
}

function nan(x: number): number | undefined {
  return Number.isNaN(x) ? undefined : x;
}
