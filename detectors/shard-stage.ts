/**
 * The runner of a shard stage (`detect --stage shard`, docs/operations.md "Capacity"): it owns
 * host-group partitions of GPU samples and collectives, runs the detectors of the `shard` stage on
 * them (the GPU's own: throttle) and reduces collectives to one record per communicator and step
 * for the job stage (detectors/slowlink/shard-reduce.ts). Its records come out with `take()`, in
 * `shard`, for the pipeline to publish before the delivery is acknowledged.
 */
import type { RankwatchEvent } from '../schema/events.js';
import type { DetectorOutput } from '../schema/output.js';
import { parseShardKey } from '../stream/host-groups.js';
import type { DetectorConfig } from './detector.js';
import { DetectorRunner } from './runner.js';
import { ShardReducer, type ShardRecord } from './slowlink/shard-reduce.js';

export class ShardStageRunner extends DetectorRunner {
  private readonly reducer = new ShardReducer();
  private records: ShardRecord[] = [];
  /** The host group of the delivery in hand, from its bus key. */
  private group = 0;
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
    if (e.kind === 'collective') this.reducer.add(e, this.group, this.records);
  }

  override flush(): void {
    super.flush();
    this.reducer.flush(this.records, this.latest);
  }

  override endOfInput(): void {
    super.endOfInput();
    this.reducer.flush(this.records, this.latest);
  }

  /** An idle bus: nothing more is coming for now, so the open steps go to the job stage. */
  override advance(now: number): void {
    super.advance(now);
    this.reducer.flush(this.records, this.latest);
  }

  override forget(job: string): void {
    super.forget(job);
    this.reducer.forget(job);
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
