/**
 * The runner of a shard stage (`detect --stage shard`, docs/operations.md "Capacity"): it owns
 * host-group partitions of GPU samples and collectives, runs the detectors of the `shard` stage on
 * them (the GPU's own: throttle) and reduces collectives to one record per communicator and step
 * for the job stage (detectors/slowlink/shard-reduce.ts), and sends the hang detector's live signs
 * (GPU verdicts, collective progress: detectors/hang/shard-signs.ts). Its records come out with
 * `take()`, in `shard`, for the pipeline to publish before the delivery is acknowledged.
 */
import type { RankwatchEvent } from '../schema/events.js';
import type { DetectorOutput } from '../schema/output.js';
import { gpusPerHost, groupOfRank, parseShardKey } from '../stream/host-groups.js';
import type { DetectorConfig } from './detector.js';
import { SignsTracker } from './hang/shard-signs.js';
import { DetectorRunner } from './runner.js';
import { type ShardRecord, ShardReducer } from './slowlink/shard-reduce.js';

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

  constructor(config: Partial<DetectorConfig> = {}) {
    super(config, 'shard');
  }

  /** The bus key of the events that follow (`JOB/hostgroup-N`). */
  override keyed(key: string): void {
    this.group = parseShardKey(key)?.group ?? 0;
  }

  override push(e: RankwatchEvent): void {
    super.push(e);
    if (e.ts > this.latest) this.latest = e.ts;
    if (e.kind === 'job' && e.host_group_size !== undefined)
      this.layout.set(e.job, { perHost: gpusPerHost(e), groupHosts: e.host_group_size });
    if (e.kind !== 'collective' && e.kind !== 'gpu') return;
    const l = e.job === undefined ? undefined : this.layout.get(e.job);
    const group = l && e.rank !== undefined ? groupOfRank(e.rank, l.perHost, l.groupHosts) : this.group;
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
   * A partition moved away (its first key said): the job's open steps are dropped, also those of
   * its groups in partitions this shard keeps; their records of those steps come no more, and the
   * job stage judges those steps without them after its hold.
   */
  override forget(key: string): void {
    const job = parseShardKey(key)?.job ?? key;
    super.forget(job);
    this.reducer.forget(job);
    this.signs.forget(job);
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
