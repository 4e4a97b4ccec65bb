/**
 * Every collector source, in one explicit list (no discovery), and the step that validates a
 * list of source configs against their schemas (defaults applied, unknown keys rejected),
 * returning every problem at once, each naming its key.
 */
import type { TObject } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { RankwatchError } from '../core/errors.js';
import type { Source, SourceDeps, SourceFactory } from './source.js';
import { dcgmExporter } from './sources/dcgm_exporter.js';
import { flightRecorder } from './sources/flight_recorder.js';
import { kernelLog } from './sources/kernel_log.js';
import { megatronLog } from './sources/megatron_log.js';
import { ncclInspector } from './sources/nccl_inspector.js';
import { ncclRas } from './sources/nccl_ras.js';
import { ncclTests } from './sources/nccl_tests.js';
import { ncclWatchdog } from './sources/nccl_watchdog.js';
import { nvidiaSmi } from './sources/nvidia_smi.js';

export const SOURCES: SourceFactory<TObject>[] = [
  dcgmExporter,
  nvidiaSmi,
  kernelLog,
  megatronLog,
  ncclWatchdog,
  ncclTests,
  ncclInspector,
  flightRecorder,
  ncclRas,
] as unknown as SourceFactory<TObject>[];

/** Validates every config (all problems at once), then creates the sources. Starts nothing. */
export function createSources(configs: unknown[], deps: SourceDeps): Source[] {
  const problems: string[] = [];
  const ready: [SourceFactory<TObject>, unknown][] = [];
  configs.forEach((raw, i) => {
    const type = (raw as { type?: unknown })?.type;
    const factory = SOURCES.find((s) => s.type === type);
    if (!factory) {
      problems.push(
        `sources[${i}].type: "${String(type)}" is not a source (one of ${SOURCES.map((s) => s.type).join(', ')})`,
      );
      return;
    }
    const cfg = Value.Default(factory.schema, structuredClone(raw));
    const errors = [...Value.Errors(factory.schema, cfg)];
    for (const e of errors.slice(0, 5))
      problems.push(`sources[${i}]${e.path.replaceAll('/', '.') || ''} (${factory.type}): ${e.message}`);
    if (errors.length === 0) ready.push([factory, cfg]);
  });
  if (problems.length)
    throw new RankwatchError('RANKWATCH_ERR_CONFIG', `bad collector sources:\n  ${problems.join('\n  ')}`);
  return ready.map(([f, cfg]) => f.create(cfg as never, deps));
}
