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
  /** The text each good event arrived as, aligned with `good`: stored and journaled as sent, not encoded again. */
  lines: string[];
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
  const errors = decoded.undecodable.map((u) => ({ line: u.line, reason: u.reason }));
  const good: RankwatchEvent[] = [];
  const lines: string[] = [];
  for (let i = 0; i < decoded.events.length; i++) {
    const v = validateEvent(decoded.events[i]);
    if (v.ok) {
      good.push(v.event);
      lines.push(decoded.lines[i]);
    } else errors.push({ line: decoded.at[i], reason: v.reason });
  }
  const rejected = errors.length;
  // Capped only once sorted: the reply lists the first rejected lines, whichever way they failed.
  errors.sort((a, b) => a.line - b.line);
  errors.length = Math.min(errors.length, maxReasons);
  return { good, lines, errors, rejected };
}
