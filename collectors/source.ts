/**
 * The shape every collector source has: a `type` (lower_snake), a TypeBox config schema with
 * defaults (unknown keys rejected), and `create(config, deps)` returning something with a fast
 * `start()` and an idempotent `stop()`. What a source needs from the outside comes in `deps`.
 * Sources never throw at runtime: unreadable input is a parse problem, an unreachable input a
 * source error; both are counted and the source keeps trying.
 */
import type { Static, TObject } from '@sinclair/typebox';
import type { ParseProblem } from './parsers/problems.js';
import type { RankMap } from './ranks.js';

export interface Logger {
  info(msg: string): void;
  warn(msg: string): void;
}

export interface SourceDeps {
  /** This node's name, for events that carry no host of their own. */
  host: string;
  logger: Logger;
  now(): number;
  /** Hands events to the collector's buffer (never blocks; the collector bounds memory). */
  emit(events: unknown[]): void;
  /** Lines or records the source could not use. */
  parseProblems(source: string, problems: ParseProblem[]): void;
  /** Fields the input carries that the source does not use (e.g. unknown DCGM_* metrics), with
   * their sample counts: counted apart from parse errors, since they are not errors. */
  ignoredFields?(source: string, fields: Record<string, number>): void;
  /** The input could not be reached or read; the source retries on its own. */
  sourceError(source: string, err: unknown): void;
  /** PCI bus id ("0000:3b:00") → GPU index on this node, shared between sources. */
  pciMap: Map<string, number>;
  /** (host, pid | GPU) → (job, global rank) and each rank's step boundaries, learnt from the hook's
   * step events the collector relays; shared between sources. */
  ranks?: RankMap;
  /** Input records the source held and then could not use (unmappable, outside any step…), by reason. */
  dropped?(source: string, reason: string, n: number, detail?: string): void;
}

export interface Source {
  readonly type: string;
  /** `type`, or `type:name` when configured with a name, for counters and logs. */
  readonly name: string;
  start(): void;
  stop(): Promise<void>;
}

export interface SourceFactory<S extends TObject = TObject> {
  type: string;
  description: string;
  schema: S;
  create(config: Static<S>, deps: SourceDeps): Source;
}

export const sourceName = (type: string, name?: string) => (name ? `${type}:${name}` : type);

/** Waits that grow while an input keeps failing: 1 s, 2 s, 4 s … up to 30 s. */
export function backoffMs(failures: number, baseMs = 1000, maxMs = 30_000): number {
  return Math.min(maxMs, baseMs * 2 ** Math.max(0, failures - 1));
}
