/**
 * The one way to put a pipeline together: `replay` (a file), `up` and `demo` (the in-process bus),
 * and `detect` (Kafka) all build theirs here, so each gets the same validation, set-aside, store
 * retry and sink fan-out, and prints the same topology line (`describe()`).
 */
import type { DetectorConfig } from '../detectors/detector.js';
import { DetectorRunner } from '../detectors/runner.js';
import { Pipeline, type PipelineOptions } from './pipeline.js';

export interface PipelineSpec extends Omit<PipelineOptions, 'runner'> {
  /** Detector settings over DETECTOR_DEFAULTS (detectors/runner.ts). */
  detectors?: Partial<DetectorConfig>;
}

export function buildPipeline(spec: PipelineSpec): Pipeline {
  const { detectors, ...options } = spec;
  return new Pipeline({ ...options, runner: new DetectorRunner(detectors) });
}
