/**
 * The one way to put a pipeline together: `replay` (a file), `up` and `demo` (the in-process bus),
 * and `detect` (Kafka) all build theirs here, so each gets the same validation, set-aside, store
 * retry and sink fan-out, and prints the same topology line (`describe()`).
 */
import type { DetectorConfig, DetectorStage } from '../detectors/detector.js';
import { type JobStageOptions, JobStageRunner } from '../detectors/job-stage.js';
import { DetectorRunner } from '../detectors/runner.js';
import { ShardStageRunner } from '../detectors/shard-stage.js';
import { Pipeline, type PipelineOptions } from './pipeline.js';

export interface PipelineSpec extends Omit<PipelineOptions, 'runner' | 'onShardRecords'> {
  /** Detector settings over DETECTOR_DEFAULTS (detectors/runner.ts). */
  detectors?: Partial<DetectorConfig>;
  /**
   * One stage of the sharded layout (docs/operations.md, "Capacity"): `shard` runs the shard
   * detectors and reduces collectives for `shardSink`; `job` runs the rest and takes the shards'
   * records from `shardRecordsTopic`. Unset: every detector, one process.
   */
  stage?: DetectorStage;
  jobStage?: JobStageOptions;
}

export function buildPipeline(spec: PipelineSpec): Pipeline {
  const { detectors, stage, jobStage, ...options } = spec;
  if (stage === 'shard') return new Pipeline({ ...options, runner: new ShardStageRunner(detectors) });
  if (stage === 'job') {
    const runner = new JobStageRunner(detectors, jobStage);
    return new Pipeline({
      ...options,
      runner,
      holds: runner,
      onShardRecords: (records) => {
        for (const r of records) runner.shardRecord(r);
      },
    });
  }
  return new Pipeline({ ...options, runner: new DetectorRunner(detectors) });
}
