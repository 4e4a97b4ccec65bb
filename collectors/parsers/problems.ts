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

/** A v1 event with extension fields (the contract keeps unknown fields). */
export type Open<T> = T & { [extra: string]: unknown };
