/**
 * Compiled validators for the v1 contract. `validateEvent` never throws: it returns the event or
 * the first reason it is malformed, naming the field, so bad input can be set aside and counted.
 */
import type { TSchema } from '@sinclair/typebox';
import { TypeCompiler, type ValueError } from '@sinclair/typebox/compiler';
import { EVENT_SCHEMAS, type EventKind, type RankwatchEvent } from './events.js';

type Checker = { Check(v: unknown): boolean; Errors(v: unknown): { First(): ValueError | undefined } };
const compiled: Record<string, Checker> = Object.fromEntries(
  Object.entries(EVENT_SCHEMAS).map(([kind, schema]) => [
    kind,
    TypeCompiler.Compile(schema as TSchema) as Checker,
  ]),
);

export type Validated = { ok: true; event: RankwatchEvent } | { ok: false; reason: string };

export const EVENT_KINDS = Object.keys(EVENT_SCHEMAS) as EventKind[];

export function validateEvent(value: unknown): Validated {
  const reason = eventProblem(value);
  return reason === undefined ? { ok: true, event: value as RankwatchEvent } : { ok: false, reason };
}

/**
 * Why a value is not a valid event, or undefined when it is: `validateEvent` without a result
 * object per event, for the pipeline, which checks every event it is delivered.
 */
export function eventProblem(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'not a JSON object';
  const kind = (value as { kind?: unknown }).kind;
  if (typeof kind !== 'string') return 'missing field: kind';
  const check = Object.hasOwn(compiled, kind) ? compiled[kind] : undefined;
  if (check === undefined) return `unknown kind "${kind}" (expected one of ${EVENT_KINDS.join(', ')})`;
  if (check.Check(value)) return undefined;
  const first = check.Errors(value).First();
  if (first === undefined) return `invalid ${kind} event`;
  const field = first.path.replace(/^\//, '').replaceAll('/', '.') || '(event)';
  return first.value === undefined
    ? `${kind}: missing field: ${field}`
    : `${kind}.${field}: ${first.message} (got ${preview(first.value)})`;
}

/** Parses one JSON line and validates it. */
export function parseEventLine(line: string): Validated {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (err) {
    return { ok: false, reason: `not valid JSON: ${(err as Error).message}` };
  }
  return validateEvent(value);
}

function preview(v: unknown): string {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 40 ? `${s.slice(0, 37)}...` : s;
}
