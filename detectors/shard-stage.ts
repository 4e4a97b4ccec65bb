/**
 * The runner of a shard stage (`detect --stage shard`, docs/operations.md "Capacity"): it owns
 * host-group partitions of GPU samples and collectives, runs the detectors of the `shard` stage on
 * them (the GPU's own: throttle) and reduces collectives to one record per communicator and step
 * for the job stage (detectors/slowlink/shard-reduce.ts), and sends the hang detector's live signs
 * (GPU verdicts, collective progress: detectors/hang/shard-signs.ts), and passes its groups' step
 * events on in columns (shard-forward.ts). Its records come out with
 * `take()`, in `shard`, for the pipeline to publish before the delivery is acknowledged.
 */
import type { RankwatchEvent } from '../schema/events.js';
import type { DetectorOutput } from '../schema/output.js';
import { gpusPerHost, groupOfRank, parseShardKey } from '../stream/host-groups.js';
import type { DetectorConfig } from './detector.js';
import { FORGET_MS, SignsTracker } from './hang/shard-signs.js';
import { DetectorRunner } from './runner.js';
import { passOn } from './shard-forward.js';
import { type ShardRecord, ShardReducer } from './slowlink/shard-reduce.js';

/** The jobs whose events came under one bus key, each with the host groups of its collectives. */
type Under = Map<string, Set<number>>;

export class ShardStageRunner extends DetectorRunner {
  private readonly reducer = new ShardReducer();
  /** The hang detector's signs (GPU verdicts, collective progress), per host group. */
  private readonly signs = new SignsTracker();
  private records: unknown[] = [];
  /** The host group of the delivery in hand, from its bus key (records of a job not yet announced). */
  private group = 0;
  /** Each job's GPUs per host and hosts per group, from its `job` event. */
  private readonly layout = new Map<string, { perHost: number; groupHosts: number }>();
  private latest = 0;
  /** Each job's latest `job` event's time: its steps wait for it at the job stage (shard-forward.ts). */
  private readonly jobAt = new Map<string, number>();
  /**
   * Per bus key read here (a delivery's first: the rest of it shares its partition), the jobs and
   * each job's host groups whose events came under it, so a partition that moves away takes
   * just its own groups along.
   */
  private readonly under = new Map<string, Under>();
  private current: Under | undefined;
  /** The job and group last noted in `current` (noted when they change, not per event). */
  private lastJob = '';
  private lastGroup = -1;
  /** Each job's latest event time here (noted once per delivery and job), and when quiet jobs are next looked for. */
  private readonly seen = new Map<string, number>();
  private nextForget = 0;

  constructor(config: Partial<DetectorConfig> = {}) {
    super(config, 'shard');
  }

  /** The bus key of the events that follow (`JOB/hostgroup-N`). */
  override keyed(key: string): void {
    this.group = parseShardKey(key)?.group ?? 0;
    let u = this.under.get(key);
    if (!u) {
      u = new Map();
      this.under.set(key, u);
    }
    this.current = u;
    this.lastJob = '';
  }

  override push(e: RankwatchEvent): void {
    // A job's steps, restarts, checkpoints and faults are the job stage's: passed on as they came
    // (shard-forward.ts). GPU samples and collectives are this stage's; a `job` event both's.
    const own = e.kind === 'gpu' || e.kind === 'collective' || e.kind === 'job';
    if (own) super.push(e);
    if (e.ts > this.latest) this.latest = e.ts;
    if (e.kind === 'job') {
      this.jobAt.set(e.job, e.ts);
      if (e.host_group_size !== undefined)
        this.layout.set(e.job, { perHost: gpusPerHost(e), groupHosts: e.host_group_size });
    }
    const job = (e as { job?: string }).job;
    if (job !== undefined && job !== this.lastJob) {
      this.lastJob = job;
      this.lastGroup = -1;
      if (!this.current?.has(job)) this.current?.set(job, new Set());
      if (e.ts > (this.seen.get(job) ?? Number.NEGATIVE_INFINITY)) this.seen.set(job, e.ts);
      if (this.latest >= this.nextForget) this.forgetQuiet();
    }
    if (e.kind === 'job' || job === undefined) return;
    const l = this.layout.get(job);
    const rank = (e as { rank?: number }).rank;
    const group =
      l && rank !== undefined && rank >= 0 ? groupOfRank(rank, l.perHost, l.groupHosts) : this.group;
    if (group !== this.lastGroup) {
      this.lastGroup = group;
      this.current?.get(job)?.add(group);
    }
    if (!own) {
      passOn(e, job, group, this.jobAt.get(job) ?? null, this.records);
      if (e.kind === 'step') this.reducer.noteStep(job, group, e.step, e.ts, this.records as ShardRecord[]);
      return;
    }
    this.signs.add(e, group, this.records);
    if (e.kind === 'collective') this.reducer.add(e, group, this.records as ShardRecord[]);
  }

  override flush(): void {
    super.flush();
    this.sendOpen();
  }

  override endOfInput(): void {
    super.endOfInput();
    this.sendOpen();
  }

  /** An idle bus: nothing more is coming for now, so the open steps go to the job stage. */
  override advance(now: number): void {
    super.advance(now);
    this.sendOpen();
  }

  /** Open steps and every group's signs not sent yet, signs first: a mark then follows what it covers. */
  private sendOpen(): void {
    this.signs.flush(this.records);
    this.reducer.flush(this.records as ShardRecord[], this.latest);
  }

  /**
   * A partition moved away (one call per key read from it): the open steps of its host groups are
   * dropped (their new owner rebuilds them from the partition and sends them whole). The groups
   * this shard keeps go on: dropped too, the part of a step read before the move would never be
   * sent, and the job stage would judge that step with part of its members. A job's GPU state goes
   * once no group of it is left here.
   */
  override forget(key: string): void {
    const u = this.under.get(key);
    this.under.delete(key);
    this.lastJob = '';
    // Nothing was read under it (or it was let go already).
    if (!u) return;
    for (const [job, groups] of u) {
      for (const g of groups) {
        this.reducer.forget(job, g);
        this.signs.forget(job, g);
      }
      if (![...this.under.values()].some((o) => o.has(job))) {
        super.forget(job);
        this.jobAt.delete(job);
        this.seen.delete(job);
        this.signs.forget(job);
      }
    }
  }

  /**
   * Jobs with nothing read here for `FORGET_MS` (an hour of event time, as the signs tracker's)
   * ended or moved away: their open steps sent, then all they held dropped. A shard runs for
   * months; the jobs it saw do not stay.
   */
  private forgetQuiet(): void {
    this.nextForget = this.latest + 60_000;
    for (const [job, at] of this.seen) {
      if (this.latest - at <= FORGET_MS) continue;
      this.reducer.flushJob(job, this.records as ShardRecord[], this.latest);
      this.reducer.forget(job);
      this.signs.forget(job);
      super.forget(job);
      this.seen.delete(job);
      this.jobAt.delete(job);
      this.layout.delete(job);
      for (const [key, u] of this.under)
        if (u.delete(job) && u.size === 0 && u !== this.current) this.under.delete(key);
    }
  }

  override take(): DetectorOutput {
    const out = super.take();
    if (this.records.length) {
      out.shard = this.records;
      this.records = [];
    }
    return out;
  }
}
