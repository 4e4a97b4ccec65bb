/**
 * One simulated job as a job stage receives it (bench/job-stage-prof.ts, bench/job-stage-cost.ts):
 * its events keyed by host group (16 groups) in one message per host and second, as collectors
 * send them; the host-group-keyed ones run through a shard stage in this process, whose records
 * come out as the job-keyed batches do, in the order both are made.
 */
import { ShardStageRunner } from '../detectors/shard-stage.js';
import type { RankwatchEvent } from '../schema/events.js';
import { ClusterSim } from '../sim/cluster.js';
import { HostGroupKeys, parseShardKey } from '../stream/host-groups.js';
import type { Batch } from '../stream/transport.js';

export interface JobStageInput {
  /** A batch keyed by job (its `job` event: the rest comes in the shard stage's records). */
  jobBatch(b: Batch): void;
  /** Shard records the shard stage sent after a delivery. */
  records(rs: unknown[]): void;
}

/** Simulates the job and hands its job stage's input over in order; returns the job's event count. */
export function jobStageInput(ranks: number, steps: number, job: string, to: JobStageInput): number {
  const startTs = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000;
  const events = [...new ClusterSim({ ranks, steps, startTs, job }).events()];
  const keys = new HostGroupKeys({ groupHosts: Math.max(1, Math.floor(ranks / 8 / 16)) });
  const perHostSecond = new Map<string, RankwatchEvent[]>();
  for (const e of events) {
    const k = `${(e as { host?: string }).host ?? ''}|${Math.floor(e.ts / 1000)}`;
    const list = perHostSecond.get(k) ?? [];
    perHostSecond.set(k, list);
    list.push(e);
  }
  const shard = new ShardStageRunner();
  const collect = () => {
    const rs = shard.take().shard ?? [];
    if (rs.length) to.records(rs);
  };
  const messages = [...perHostSecond.values()];
  for (let i = 0; i < messages.length; i += 64)
    for (const batch of keys.batch(messages.slice(i, i + 64).flat())) {
      if (!parseShardKey(batch.key)) to.jobBatch(batch);
      else {
        shard.keyed(batch.key);
        for (const e of batch.events) shard.push(e as RankwatchEvent);
        collect();
      }
    }
  shard.flush();
  collect();
  return events.length;
}
