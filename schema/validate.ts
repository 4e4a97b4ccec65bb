/**
 * Compiled validators for the v1 contract. `validateEvent` never throws: it returns the event or
 * the first reason it is malformed, naming the field, so bad input can be set aside and counted.
 */
import type { TSchema } from '@sinclair/typebox';
import { TypeCompiler, type ValueError } from '@sinclair/typebox/compiler';
import { EVENT_SCHEMAS, type EventKind, type RankwatchEvent } from './events.js';

type Checker = { Check(v: unknown): boolean; Errors(v: unknown): { First(): ValueError | undefined } };
const compile = (kind: EventKind) => TypeCompiler.Compile(EVENT_SCHEMAS[kind] as TSchema) as Checker;
const compiled: Record<string, Checker> = Object.fromEntries(
  (Object.keys(EVENT_SCHEMAS) as EventKind[]).map((kind) => [kind, compile(kind)]),
);
// Each kind's check at a call site of its own (eventProblem): one check function per site, which
// V8 inlines, where one site calling all eight through a lookup by kind could not (validation
// 33-38 → 19-22 ns per event on the simulator's and the field's mix). The same compiled checks,
// so exactly as strict as the schemas.
const { step: STEP, collective: COLLECTIVE, gpu: GPU } = compiled;

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
  // The kinds of nearly every event first, each at its own call site; the reason, and the rare
  // kinds, below.
  if (kind === 'collective') {
    if (COLLECTIVE.Check(value)) return undefined;
  } else if (kind === 'gpu') {
    if (GPU.Check(value)) return undefined;
  } else if (kind === 'step') {
    if (STEP.Check(value)) return undefined;
  }
  return problemOf(value, kind);
}

/** eventProblem's answer for any kind, the reason when there is one. */
function problemOf(value: object, kind: unknown): string | undefined {
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
