/**
 * The check an ingest body gets, shared by `POST /v1/ingest` and the collector's own dry run:
 * gunzip by magic number, decode the JSON lines, validate each event, and keep every rejected
 * line's number and reason (the first `maxReasons` of them, in line order).
 */
import type { RankwatchEvent } from '../schema/events.js';
import { validateEvent } from '../schema/validate.js';
import { decodeBatch, inflateText } from './codec.js';

export interface CheckedBody {
  good: RankwatchEvent[];
  errors: { line: number; reason: string }[];
  rejected: number;
}

/** Gunzips (by magic number), decodes and validates a body, keeping each rejected line's number. */
export function checkIngestBody(raw: Buffer, maxReasons = 50): CheckedBody | { message: string } {
  const body = inflateText(raw);
  return 'error' in body ? { message: `body: ${body.error}` } : checkIngestText(body.text, maxReasons);
}

export function checkIngestText(text: string, maxReasons: number): CheckedBody {
  const decoded = decodeBatch(text);
  const badLines = new Map(decoded.undecodable.map((u) => [u.line, u.reason]));
  const errors: { line: number; reason: string }[] = [];
  const good: RankwatchEvent[] = [];
  let rejected = badLines.size;
  for (const [line, reason] of badLines) errors.push({ line, reason });
  // decodeBatch keeps event order and skips blank lines: walk the lines to recover each number.
  let next = 0;
  let pos = 0;
  for (let n = 1; pos <= text.length; n++) {
    let end = text.indexOf('\n', pos);
    if (end < 0) end = text.length;
    const blank = text.slice(pos, end).trim() === '';
    pos = end + 1;
    if (blank || badLines.has(n)) continue;
    const v = validateEvent(decoded.events[next++]);
    if (v.ok) good.push(v.event);
    else {
      rejected++;
      errors.push({ line: n, reason: v.reason });
    }
  }
  // Capped only once sorted: the reply lists the first rejected lines, whichever way they failed.
  errors.sort((a, b) => a.line - b.line);
  errors.length = Math.min(errors.length, maxReasons);
  return { good, errors, rejected };
}
