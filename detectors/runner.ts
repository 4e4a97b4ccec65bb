/**
 * The one runner every detector shares: routes events by job, assembles step frames, owns
 * per-job state and its lifetime, links findings that explain each other, and hands out what
 * the detectors produced. Pure: the only clock is the events' `ts`, so a replay of a recorded
 * stream gives exactly the findings of the live run.
 */
import { DEFAULT_CONVENTION } from '../mfu/flops.js';
import type { CollectiveEvent, JobEvent, RankwatchEvent, StepEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import type { DetectorOutput, MfuPoint } from '../schema/output.js';
import { CHECKPOINT_ADVISOR_DEFAULTS } from './checkpoint/advisor.js';
import type {
  Detector,
  DetectorConfig,
  DetectorContext,
  DetectorEntry,
  DetectorStage,
  EventKind,
  JobDetector,
  JobEntry,
} from './detector.js';
import { TRIAGE_DEFAULTS } from './faults/xid.js';
import { FindingLog, LIFECYCLE_DEFAULTS } from './findings.js';
import { HANG_DEFAULTS } from './hang/hang.js';
import { DETECTORS, STRAGGLER, THROTTLE } from './list.js';
import { MFU_DROP_DEFAULTS } from './mfu/drop.js';
import { noteMfu, resolveMfuUnavailable } from './mfu/notes.js';
import { MfuSeries } from './mfu/series.js';
import { NCCL_CHECK_DEFAULTS } from './nccl_tests/nccl_tests.js';
import { type QuietEnd, type QuietSweep, QuietTracker } from './quiet.js';
import { rollupSteps } from './rollup.js';
import type { ShardReduced } from './slowlink/shard-reduce.js';
import { SLOWLINK_DEFAULTS } from './slowlink/slowlink.js';
import { STALL_DEFAULTS } from './stall/stall.js';
import { ASSEMBLER_DEFAULTS, RankTable, StepAssembler, type StepFrame } from './steps.js';
import { STRAGGLER_DEFAULTS } from './straggler/straggler.js';
import { THROTTLE_DEFAULTS } from './throttle/throttle.js';

export const DETECTOR_DEFAULTS: DetectorConfig = {
  convention: DEFAULT_CONVENTION,
  assembler: ASSEMBLER_DEFAULTS,
  straggler: STRAGGLER_DEFAULTS,
  throttle: THROTTLE_DEFAULTS,
  slowLink: SLOWLINK_DEFAULTS,
  mfuDrop: MFU_DROP_DEFAULTS,
  lifecycle: LIFECYCLE_DEFAULTS,
  ncclChecks: NCCL_CHECK_DEFAULTS,
  checkpointInterval: CHECKPOINT_ADVISOR_DEFAULTS,
  triage: TRIAGE_DEFAULTS,
  hang: HANG_DEFAULTS,
  stall: STALL_DEFAULTS,
};

const JOB_SCOPED = new Set([
  'straggler',
  'slow_link',
  'mfu_drop',
  'mfu_implausible',
  'mfu_unavailable',
  'recurring_stall',
]);

export interface RunnerCounters {
  events: number;
  jobs: number;
  duplicate_steps: number;
  late_steps: number;
  /** Jobs with no step for a while (findings still open), and jobs ended because they went quiet. */
  stale_jobs: number;
  quiet_ended_jobs: number;
  /**
   * Collectives of a job that had finished, dated before its end, that came after it (a node
   * collector sends a step's reduced collectives seconds after the step): not judged, and they do
   * not bring the job back.
   */
  collectives_after_finish: number;
}

interface JobRuntime {
  id: string;
  meta?: JobEvent;
  ranks: RankTable;
  assembler: StepAssembler;
  /** One per job entry of the list, in its order. */
  detectors: JobDetector[];
  mfu: MfuSeries;
  lastTs: number;
  /** Whether the job's MFU problem (implausible or unavailable) was said: once per job. */
  mfuNoted: boolean;
}

export class DetectorRunner {
  private readonly jobs = new Map<string, JobRuntime>();
  /** Job and rank on each GPU, by host then GPU index: no `host/gpu` string and object per rank. */
  private readonly jobOfGpu = new Map<string, { jobs: (string | undefined)[]; ranks: number[] }>();
  /** Final MFU of finished jobs, most recent last, bounded. */
  private readonly finishedMfu = new Map<string, number | undefined>();
  /** When finished jobs finished, most recent last, bounded. */
  private readonly finishedAt = new Map<string, number>();
  protected out: DetectorOutput = { findings: [], mfu: [], rollups: [], slowGpus: [] };
  protected readonly log: FindingLog;
  private readonly ctx: DetectorContext;
  /** The fleet detectors, one per fleet entry of the list. */
  private readonly fleet = new Map<string, Detector>();
  /**
   * Who reads each event kind: fleet detectors, and job entries of the list (their index in
   * JobRuntime.detectors). Both in one lookup: every event of the stream makes it.
   */
  private readonly reading = new Map<EventKind, { fleet: Detector[]; job: number[] }>();
  private readonly advancing: Detector[] = [];
  private readonly jobChanged: Detector[] = [];
  private readonly jobEntries: JobEntry[];
  /** The list's entries this runner runs: all of them, or one stage's (the sharded layout). */
  private readonly entries: readonly DetectorEntry[];
  private readonly closed: StepFrame[] = [];
  private scratch = new Float64Array(1024);
  private readonly cfg: DetectorConfig;
  private readonly counters: RunnerCounters = {
    events: 0,
    jobs: 0,
    duplicate_steps: 0,
    late_steps: 0,
    stale_jobs: 0,
    quiet_ended_jobs: 0,
    collectives_after_finish: 0,
  };
  private lastTs = 0;
  private readonly quiet: QuietTracker;
  /** Configuration of jobs that ended, so one that resumes gets its MFU back; bounded. */
  private readonly endedMeta = new Map<string, JobEvent>();

  constructor(config: Partial<DetectorConfig> = {}, stage?: DetectorStage) {
    this.cfg = { ...DETECTOR_DEFAULTS, ...config };
    this.entries = stage ? DETECTORS.filter((d) => d.stage === stage) : DETECTORS;
    this.jobEntries = this.entries.filter((d): d is JobEntry => d.scope === 'job');
    this.log = new FindingLog(this.out.findings, this.cfg.lifecycle);
    this.quiet = new QuietTracker(this.cfg.lifecycle);
    this.ctx = {
      log: this.log,
      config: this.cfg,
      ownerOf: (host, gpu) => {
        const h = this.jobOfGpu.get(host);
        const job = h?.jobs[gpu];
        return job === undefined ? undefined : { job, rank: h!.ranks[gpu] };
      },
      jobMeta: (job) => this.jobs.get(job)?.meta ?? this.endedMeta.get(job),
    };
    const readersOf = (kind: EventKind) => {
      let r = this.reading.get(kind);
      if (!r) {
        r = { fleet: [], job: [] };
        this.reading.set(kind, r);
      }
      return r;
    };
    for (const entry of this.entries) {
      if (entry.scope === 'job') {
        const index = this.jobEntries.indexOf(entry);
        for (const kind of entry.reads) readersOf(kind).job.push(index);
        continue;
      }
      const d = entry.create(this.ctx);
      this.fleet.set(entry.name, d);
      for (const kind of entry.reads) readersOf(kind).fleet.push(d);
      if (d.advance) this.advancing.push(d);
      if (d.jobChanged) this.jobChanged.push(d);
    }
  }

  /** The detectors, in the order they run: what the topology line names. */
  detectorNames(): string[] {
    return this.entries.map((d) => d.name);
  }

  /** The bus key of the events pushed next (a stage of the sharded layout reads it). */
  keyed(_key: string): void {}

  push(e: RankwatchEvent): void {
    // `ts` and `kind` read once: events of every kind pass here, so each read of them is a
    // lookup by the object's shape (megamorphic), not a load at a known place.
    const ts = e.ts;
    const kind = e.kind;
    this.counters.events++;
    if (ts > this.lastTs) this.lastTs = ts;
    for (let k = 0; k < this.advancing.length; k++) this.advancing[k].advance!(ts);
    const before = this.out.findings.length;
    const swept = this.quiet.advance(ts);
    if (swept) this.sweepQuiet(swept);
    if (kind === 'step') this.onStep(e as StepEvent);
    else if (kind === 'job') this.onJob(e as JobEvent);
    this.dispatch(e, kind);
    if (kind === 'job_event') this.onJobEvent(e as Extract<RankwatchEvent, { kind: 'job_event' }>);
    if (this.out.findings.length > before) this.link(before);
  }

  private onJobEvent(e: Extract<RankwatchEvent, { kind: 'job_event' }>): void {
    if (e.event === 'finished') this.finishJob(e.job, e.ts);
    else if (e.event === 'restart') for (const d of this.jobs.get(e.job)?.detectors ?? []) d.restart?.();
    for (const d of this.jobChanged) d.jobChanged!(e);
  }

  /**
   * An event to the detectors that read its kind, in list order: job detectors of the job it names
   * (a collective makes its job known), or of every job when it names none (a fault).
   */
  private dispatch(e: RankwatchEvent, kind: EventKind): void {
    // Indexed loops and no array per event: this runs for every event of the stream.
    const reading = this.reading.get(kind);
    if (reading === undefined) return;
    const fleet = reading.fleet;
    for (let k = 0; k < fleet.length; k++) fleet[k].event!(e);
    const readers = reading.job;
    if (readers.length === 0) return;
    if (kind === 'collective') {
      this.toJob(e as CollectiveEvent, readers);
      return;
    }
    const id = (e as { job?: string }).job;
    if (id !== undefined) {
      const j = this.jobs.get(id);
      if (j !== undefined) for (let k = 0; k < readers.length; k++) j.detectors[readers[k]].event!(e);
      return;
    }
    for (const j of this.jobs.values())
      for (let k = 0; k < readers.length; k++) j.detectors[readers[k]].event!(e);
  }

  /** A collective to the job detectors that read it; not to a job that finished before it. */
  protected toJob(e: CollectiveEvent, readers = this.reading.get('collective')?.job ?? []): void {
    let j = this.jobs.get(e.job);
    if (j === undefined) {
      if (e.ts <= (this.finishedAt.get(e.job) ?? Number.NEGATIVE_INFINITY)) {
        this.counters.collectives_after_finish++;
        return;
      }
      j = this.job(e.job);
    }
    for (let k = 0; k < readers.length; k++) j.detectors[readers[k]].event!(e);
  }

  /** A collective the shards reduced, to the job detectors that take one; not to a job that finished before it. */
  protected toJobReduced(r: ShardReduced): void {
    const finished = this.jobs.has(r.job)
      ? Number.NEGATIVE_INFINITY
      : (this.finishedAt.get(r.job) ?? Number.NEGATIVE_INFINITY);
    if (r.t === 'edges' && r.edges.some((x) => x[11] <= finished)) {
      // Each edge as its own record was: those before the finish are counted, the rest judged.
      const late = r.edges.filter((x) => x[11] > finished);
      for (const x of r.edges) if (x[11] <= finished) this.counters.collectives_after_finish += x[10];
      if (!late.length) return;
      r = { ...r, edges: late };
    } else if (r.t === 'reduced' && r.ts <= finished) {
      this.counters.collectives_after_finish += r.count;
      return;
    }
    for (const d of this.job(r.job).detectors) d.reduced?.(r);
  }

  /** The running instance of a fleet entry (for the links between findings). */
  protected fleetDetector<D>(entry: { name: string; create(...a: never[]): D }): D | undefined {
    return this.fleet.get(entry.name) as D | undefined;
  }

  /** Closes every open step (end of input). Findings stay open: the stream may go on. */
  flush(): void {
    const before = this.out.findings.length;
    for (const job of this.jobs.values()) this.closeOpenSteps(job);
    for (const d of this.fleet.values()) d.flush?.(this.lastTs);
    if (this.out.findings.length > before) this.link(before);
  }

  /**
   * Moves the quiet-job clock to `now` when the caller's bus is idle (a wall-clock time the caller
   * reads; detectors never do): jobs with no step for long enough go stale, then end.
   */
  advance(now: number): void {
    const before = this.out.findings.length;
    // What must fire without an event of its own (a hang whose job sends nothing more) fires now too.
    for (const d of this.advancing) d.advance!(now);
    this.sweepQuiet(this.quiet.advance(now, true)!);
    if (this.out.findings.length > before) this.link(before);
  }

  /**
   * End of a finished input (replay of a recorded file): flushes, then ends every job that did not
   * finish, each at the time the live run would have ended it (its last step plus the end
   * threshold), so replay and live give the same findings.
   */
  endOfInput(): void {
    this.flush();
    const before = this.out.findings.length;
    for (const end of this.quiet.endAll()) this.endQuietJob(end);
    if (this.out.findings.length > before) this.link(before);
  }

  /** Whether a job is `running` or `stale` (no step for a while); undefined once ended or unknown. */
  jobState(job: string): 'running' | 'stale' | undefined {
    return this.jobs.has(job) ? this.quiet.state(job) : undefined;
  }

  /** Takes what the detectors produced since the last call. */
  take(): DetectorOutput {
    const o = this.out;
    this.out = { findings: [], mfu: [], rollups: [], slowGpus: [] };
    this.log.retarget(this.out.findings);
    return o;
  }

  stats(): RunnerCounters {
    // Jobs that ended or moved away counted theirs when they went.
    let dup = this.counters.duplicate_steps;
    let late = this.counters.late_steps;
    for (const j of this.jobs.values()) {
      dup += j.assembler.duplicates;
      late += j.assembler.late;
    }
    let stale = 0;
    for (const id of this.jobs.keys()) if (this.quiet.state(id) === 'stale') stale++;
    return {
      ...this.counters,
      jobs: this.jobs.size,
      duplicate_steps: dup,
      late_steps: late,
      stale_jobs: stale,
    };
  }

  /** Overall MFU of a job so far. */
  jobMfu(job: string): number | undefined {
    return this.jobs.get(job)?.mfu.overall() ?? this.finishedMfu.get(job);
  }

  openFindings(): Finding[] {
    return this.log.openFindings();
  }

  private job(id: string): JobRuntime {
    let j = this.jobs.get(id);
    if (!j) {
      this.quiet.seen(id, this.lastTs);
      const ranks = new RankTable(64);
      j = {
        id,
        ranks,
        assembler: new StepAssembler(64, 0, this.cfg.assembler),
        detectors: this.jobEntries.map((entry) => entry.create({ id, ranks }, this.ctx)),
        mfu: new MfuSeries(id, this.cfg.convention),
        lastTs: 0,
        mfuNoted: false,
      };
      this.jobs.set(id, j);
      // A job that resumes after it ended: its configuration still holds.
      const meta = this.endedMeta.get(id);
      if (meta) this.onJob(meta);
    }
    return j;
  }

  private onJob(e: JobEvent): void {
    const j = this.job(e.job);
    j.meta = e;
    j.ranks.ensure(e.world_size - 1);
    j.assembler.expected = e.world_size;
    const held = j.mfu.configure(e);
    // A job event after the first steps (or one that fixes the GPU model) ends "no MFU".
    if (j.mfuNoted && !j.mfu.unavailable() && resolveMfuUnavailable(this.log, j.id, e.ts)) j.mfuNoted = false;
    // Steps that closed before it get their MFU now.
    for (const point of held) {
      this.emitMfu(j, point);
      this.noteMfu(j, point, point.ts);
    }
  }

  private onStep(e: StepEvent): void {
    // Its own step can reveal that the job had ended first (quiet past the threshold): the old run's
    // findings resolve, and the job goes on as a new run with fresh detector state.
    const ended = this.quiet.step(e.job, e.ts);
    if (ended) {
      this.endQuietJob(ended);
      this.quiet.step(e.job, e.ts);
    }
    const j = this.job(e.job);
    j.lastTs = Math.max(j.lastTs, e.ts);
    const stage = e.stage ?? this.stageOf(j, e.rank);
    if (j.ranks.learn(e.rank, e.host, e.gpu, stage)) this.setOwner(e.host, e.gpu, j.id, e.rank);
    j.assembler.add(e, this.closed);
    if (this.closed.length) this.processClosed(j);
  }

  private setOwner(host: string, gpu: number, job: string, rank: number): void {
    let h = this.jobOfGpu.get(host);
    if (!h) {
      h = { jobs: [], ranks: [] };
      this.jobOfGpu.set(host, h);
    }
    // Filled up to the index, not left holey: GPU indexes are small.
    while (h.jobs.length <= gpu) {
      h.jobs.push(undefined);
      h.ranks.push(-1);
    }
    h.jobs[gpu] = job;
    h.ranks[gpu] = rank;
  }

  /** Without a `stage` field: Megatron order puts pipeline stages outermost. */
  private stageOf(j: JobRuntime, rank: number): number {
    const p = j.meta?.parallel;
    if (!p || !j.meta) return 0;
    return Math.floor(rank / Math.max(1, j.meta.world_size / p.pp));
  }

  private processClosed(j: JobRuntime): void {
    for (const f of this.closed) {
      if (this.scratch.length < j.ranks.gpu.length) this.scratch = new Float64Array(j.ranks.gpu.length);
      const stepMs = rollupSteps(j.id, f, j.ranks, this.scratch, this.out.rollups);
      this.quiet.stepTime(j.id, stepMs);
      for (const d of j.detectors) d.step?.(f, stepMs);
      // MFU last, so a drop sees the findings that explain it.
      const point = j.mfu.process(f, stepMs);
      if (point) this.emitMfu(j, point);
      this.noteMfu(j, point, f.ts);
      for (const d of j.detectors) d.figures?.(this.out);
      j.assembler.release(f);
    }
    this.closed.length = 0;
  }

  private emitMfu(j: JobRuntime, point: MfuPoint): void {
    this.out.mfu.push(point);
    for (const d of j.detectors) d.mfu?.(point);
  }

  /** Says once per job why its MFU cannot be true, or why there is none. */
  private noteMfu(j: JobRuntime, point: MfuPoint | undefined, ts: number): void {
    if (j.mfuNoted) return;
    if (point?.implausible) {
      j.mfuNoted = true;
      noteMfu(this.log, j.id, 'mfu_implausible', ts, point.implausible, {
        step: point.step,
        mfu: point.mfu,
        tokens: point.tokens,
      });
    } else if (!point && !j.mfu.waitingForJob()) {
      const why = j.mfu.unavailable();
      if (why) {
        j.mfuNoted = true;
        noteMfu(this.log, j.id, 'mfu_unavailable', ts, why);
      }
    }
  }

  /** Closes the steps a job left open, so their figures count, and lets its detectors close theirs. */
  private closeOpenSteps(j: JobRuntime): void {
    j.assembler.flush(this.closed);
    this.processClosed(j);
    // Steps still held for a job event at the end of input (or when the job goes quiet): say why.
    const why = j.mfu.holding() ? j.mfu.unavailable() : undefined;
    if (why && !j.mfuNoted) {
      j.mfuNoted = true;
      noteMfu(this.log, j.id, 'mfu_unavailable', j.lastTs, why);
    }
    for (const d of j.detectors) {
      d.flush?.(j.lastTs);
      d.figures?.(this.out);
    }
  }

  private finishJob(id: string, ts: number): void {
    const j = this.jobs.get(id);
    if (!j) return;
    this.closeOpenSteps(j);
    // What belongs to the job ends with it; hardware findings (throttle, XID) outlive it.
    for (const f of this.log.openFindings()) {
      if (f.job !== id || !JOB_SCOPED.has(f.type)) continue;
      this.log.resolve(f.id, ts, {
        summary: `${f.host || id}: job ${id} finished while the ${f.type} persisted.`,
        evidence: { ...f.evidence, resolved_reason: 'job_finished' },
      });
    }
    if (j.meta) this.endedMeta.set(id, j.meta);
    if (this.endedMeta.size > 1000) this.endedMeta.delete(this.endedMeta.keys().next().value!);
    this.quiet.forget(id);
    this.finishedMfu.set(id, j.mfu.overall());
    if (this.finishedMfu.size > 1000) this.finishedMfu.delete(this.finishedMfu.keys().next().value!);
    this.finishedAt.set(id, ts);
    if (this.finishedAt.size > 1000) this.finishedAt.delete(this.finishedAt.keys().next().value!);
    this.dropJob(id, j);
  }

  /**
   * Lets a job go without ending it: another process now owns its stream (a Kafka rebalance moved
   * its partition), so nothing is emitted and its open incidents are not resolved here. Kept, its
   * state would go stale, and the watermark of other traffic would end the job here ("went quiet")
   * while it runs on. Events of the job that come later start it afresh.
   */
  forget(id: string): void {
    for (const d of this.fleet.values()) d.forgetJob?.(id);
    const j = this.jobs.get(id);
    if (!j) return;
    for (const f of this.log.openFindings())
      if (f.job === id && JOB_SCOPED.has(f.type)) this.log.forget(f.id);
    this.quiet.forget(id);
    this.dropJob(id, j);
  }

  /** Judges whether a job went quiet on its own clock where `clockOf` gives one (a job stage's sharded jobs). */
  protected judgeQuietBy(clockOf: (job: string) => number | undefined): void {
    this.quiet.judgeBy(clockOf);
  }

  /** A job's state goes; its late and duplicate steps stay counted. */
  private dropJob(id: string, j: JobRuntime): void {
    this.counters.duplicate_steps += j.assembler.duplicates;
    this.counters.late_steps += j.assembler.late;
    this.jobs.delete(id);
    this.releaseGpus(id);
  }

  private releaseGpus(id: string): void {
    for (const [host, h] of this.jobOfGpu) {
      let left = 0;
      for (let g = 0; g < h.jobs.length; g++) {
        if (h.jobs[g] === id) h.jobs[g] = undefined;
        else if (h.jobs[g] !== undefined) left++;
      }
      if (left === 0) this.jobOfGpu.delete(host);
    }
  }

  private sweepQuiet(swept: QuietSweep): void {
    for (const id of swept.stale) {
      // Stale: close the steps it left open, so their figures count; findings stay open.
      const j = this.jobs.get(id);
      if (j) this.closeOpenSteps(j);
    }
    for (const end of swept.ended) this.endQuietJob(end);
  }

  /** A job that went quiet has ended: what belongs to it resolves, at the time it ended, with the reason. */
  private endQuietJob(end: QuietEnd): void {
    const { job, lastStepTs, endTs } = end;
    const j = this.jobs.get(job);
    if (!j) {
      this.quiet.forget(job);
      return;
    }
    // Its last steps count first, so what they open resolves with the same reason.
    this.closeOpenSteps(j);
    const since = new Date(lastStepTs).toISOString();
    const quietS = Math.round((endTs - lastStepTs) / 1000);
    for (const f of this.log.openFindings()) {
      if (f.job !== job || !JOB_SCOPED.has(f.type)) continue;
      this.log.resolve(f.id, endTs, {
        summary: `${f.host || job}: job ${job} went quiet at ${since} (no step for ${quietS} s) while the ${f.type} was open.`,
        evidence: { ...f.evidence, resolved_reason: 'job_quiet', quiet_since_ts: lastStepTs },
      });
    }
    this.counters.quiet_ended_jobs++;
    this.finishJob(job, endTs);
  }

  /** Links newly opened findings with the open ones that explain them (throttle <-> straggler). */
  protected link(from: number): void {
    const emitted = this.out.findings.slice(from);
    // A throttle costs what the straggler it explains costs, as that estimate firms up.
    for (const f of emitted) {
      if (f.type !== 'straggler' || f.state === 'open') continue;
      for (const id of f.related ?? []) {
        if (this.log.get(id)?.type === 'throttle')
          this.log.update(id, f.ts, { est_cost_pct: f.est_cost_pct });
      }
    }
    const fresh = emitted.filter((f) => f.state === 'open');
    for (const f of fresh) {
      if (f.type === 'straggler') {
        const ids = this.throttleIdsFor(f);
        if (ids.length === 0 && f.gpu !== undefined) {
          const id = this.fleetDetector(THROTTLE)?.detector.explainByPowerCap(f.host, f.gpu, f.ts, f.id);
          if (id) ids.push(id);
        }
        for (const id of ids) this.relate(f, id);
      } else if (f.type === 'throttle') this.linkThrottle(f);
    }
  }

  /** A throttle finding that opened: it explains the open straggler incidents on its GPU. */
  protected linkThrottle(f: Finding): void {
    const straggler = this.jobEntries.indexOf(STRAGGLER);
    if (straggler < 0) return;
    for (const j of this.jobs.values()) {
      const d = j.detectors[straggler] as ReturnType<typeof STRAGGLER.create>;
      for (const inc of d.detector.openIncidents()) {
        if (inc.host !== f.host) continue;
        const gpus = inc.ranks.map((r) => j.ranks.gpu[r]);
        if (f.gpu === undefined || gpus.includes(f.gpu)) this.relate(f, inc.id);
      }
    }
  }

  /** The open throttle incident of a GPU, if any. */
  protected throttleIncident(host: string, gpu: number): string | undefined {
    return this.fleetDetector(THROTTLE)?.detector.incidentFor(host, gpu);
  }

  private throttleIdsFor(f: Finding): string[] {
    const gpus =
      f.gpu !== undefined
        ? [f.gpu]
        : ((f.evidence.ranks as number[] | undefined) ?? []).map(
            (r) => this.jobs.get(f.job ?? '')?.ranks.gpu[r] ?? -1,
          );
    const ids = new Set<string>();
    for (const g of gpus) {
      const id = this.throttleIncident(f.host, g);
      if (id) ids.add(id);
    }
    return [...ids];
  }

  /** Records the link on the fresh finding and pushes an update of the older one. */
  private relate(fresh: Finding, otherId: string): void {
    if (fresh.id === otherId) return;
    // The fresh event is already out; its incident's later events must carry the link too.
    fresh.related = [...new Set([...(fresh.related ?? []), otherId])];
    this.log.amend(fresh.id, { related: fresh.related });
    const other = this.log.get(otherId);
    if (!other || (other.related ?? []).includes(fresh.id)) return;
    const patch: Partial<Finding> = { related: [...(other.related ?? []), fresh.id] };
    // A throttle costs what the straggler it explains costs.
    if (fresh.type === 'straggler' && other.type === 'throttle') patch.est_cost_pct = fresh.est_cost_pct;
    if (fresh.type === 'throttle' && other.type === 'straggler') {
      fresh.est_cost_pct = other.est_cost_pct;
      this.log.amend(fresh.id, { est_cost_pct: other.est_cost_pct });
    }
    this.log.update(otherId, fresh.ts, patch, true);
  }
}
