/**
 * What every parser returns besides its output: the lines it could not use, each with its line
 * number and reason, so a collector counts and reports bad input instead of stopping on it.
 */
export interface ParseProblem {
  /** 1-based line number within the parsed text (0 when not tied to one line). */
  line: number;
  reason: string;
  /** The offending text, cut short. */
  raw: string;
}

export function problem(line: number, reason: string, raw: string): ParseProblem {
  return { line, reason, raw: raw.length > 200 ? `${raw.slice(0, 197)}...` : raw };
}

/** Splits text into lines, dropping a trailing newline and any carriage returns. */
export function splitLines(text: string): string[] {
  const lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  return lines.map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
}

const SHIPPER_STAMP = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2}))[ \t]+/;

/**
 * RFC3339 as log shippers write it, up to nanoseconds (`kubectl logs --timestamps`
 * "2026-11-30T05:12:01.123456789Z") and with "+0000" zones; NaN when it is not one.
 */
export function parseRfc3339(s: string): number {
  const m = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:?\d{2})?$/.exec(s);
  if (!m) return Number.NaN;
  const ms = (m[3] ?? '').slice(0, 3).padEnd(3, '0');
  const zone = m[4] ? m[4].replace(/^([+-]\d{2})(\d{2})$/, '$1:$2') : '';
  // Without a zone the stamp is local time, as the tool printed it.
  return zone ? Date.parse(`${m[1]}T${m[2]}.${ms}${zone}`) : new Date(`${m[1]}T${m[2]}.${ms}`).getTime();
}

/** Strips a leading shipper stamp (kubectl --timestamps, Fluent Bit, Vector); its time, if any. */
export function splitShipperStamp(line: string): { ts?: number; rest: string } {
  const m = SHIPPER_STAMP.exec(line);
  if (!m) return { rest: line };
  const ts = parseRfc3339(m[1]);
  return { ts: Number.isFinite(ts) ? ts : undefined, rest: line.slice(m[0].length) };
}

/** A v1 event with extension fields (the contract keeps unknown fields). */
export type Open<T> = T & { [extra: string]: unknown };
