/**
 * What the sharded layout's tests in one process share (detectors/sharded.test.ts,
 * detectors/job-stage-handover.test.ts): a simulated job, the unsharded run to compare with, and
 * the two topics a job stage reads, as shard stages over host-group keys would fill them.
 */
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { HostGroupKeys, parseShardKey } from '../stream/host-groups.js';
import { DetectorRunner } from './runner.js';
import { ShardStageRunner } from './shard-stage.js';
import { findingRecord } from './slowlink/shard-reduce.js';

/** A 64-rank job of 120 steps with one fault (a `sim --fault` spec). */
export const simulated = (fault: string) => [
  ...new ClusterSim({
    job: 'j',
    ranks: 64,
    steps: 120,
    seed: 5,
    startTs: 0,
    faults: [parseFault(fault)],
  }).events(),
];

/** One runner over every event, as `replay` runs it. */
export function unsharded(input: RankwatchEvent[]): Finding[] {
  const r = new DetectorRunner();
  for (const e of input) r.push(structuredClone(e));
  r.endOfInput();
  return r.take().findings;
}

/** What shard stages have sent: their GPU findings, and their records (GPU findings as records too). */
export function shardOutput() {
  const found: Finding[] = [];
  const records: unknown[] = [];
  const collect = (s: ShardStageRunner) => {
    const o = s.take();
    found.push(...o.findings);
    records.push(...(o.shard ?? []), ...o.findings.map(findingRecord));
  };
  return { found, records, collect };
}

/** Each shard's records (and GPU findings as records) and the job-stage events, as the bus would carry them. */
export function shardOut(input: RankwatchEvent[], shards: number) {
  const runners = Array.from({ length: shards }, () => new ShardStageRunner());
  const { found, records, collect } = shardOutput();
  const jobEvents: RankwatchEvent[] = [];
  // One host per group: 8 groups over the shards.
  for (const b of new HostGroupKeys({ groupHosts: 1 }).batch(structuredClone(input), 500)) {
    const key = parseShardKey(b.key);
    if (!key) {
      jobEvents.push(...(b.events as RankwatchEvent[]));
      continue;
    }
    const s = runners[key.group % shards];
    s.keyed(b.key);
    for (const e of b.events) s.push(e as RankwatchEvent);
    collect(s);
  }
  for (const s of runners) {
    s.flush();
    collect(s);
  }
  return { found, records, jobEvents };
}
