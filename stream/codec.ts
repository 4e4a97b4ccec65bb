/**
 * How a batch of events travels as bytes (Kafka message values, HTTP ingest bodies): JSON lines,
 * optionally gzip-compressed. Decoding never throws: a line that is not JSON comes back in
 * `undecodable` with its line number and reason, and the good lines around it are kept.
 */
import { gunzipSync, gzipSync } from 'node:zlib';

export interface Decoded {
  events: unknown[];
  /** The text each event was parsed from, aligned with `events` (stored as the raw event). */
  lines: string[];
  undecodable: { raw: string; reason: string; line: number }[];
}

export function encodeLines(events: unknown[]): string {
  let out = '';
  for (const e of events) out += `${JSON.stringify(e)}\n`;
  return out;
}

export function encodeBatch(events: unknown[], gzip = false): Buffer {
  const text = Buffer.from(encodeLines(events));
  return gzip ? gzipSync(text) : text;
}

const isGzip = (b: Uint8Array) => b.length >= 2 && b[0] === 0x1f && b[1] === 0x8b;

/** Decodes JSON lines, gunzipping first when the bytes start with the gzip magic number. */
export function decodeBatch(body: Uint8Array | string): Decoded {
  let text: string;
  if (typeof body === 'string') text = body;
  else {
    try {
      text = Buffer.from(isGzip(body) ? gunzipSync(body) : body).toString('utf8');
    } catch (err) {
      return {
        events: [],
        lines: [],
        undecodable: [{ raw: '', reason: `not valid gzip: ${(err as Error).message}`, line: 0 }],
      };
    }
  }
  const events: unknown[] = [];
  const kept: string[] = [];
  const undecodable: Decoded['undecodable'] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    try {
      events.push(JSON.parse(line));
      kept.push(line);
    } catch (err) {
      undecodable.push({ raw: line, reason: `not valid JSON: ${(err as Error).message}`, line: i + 1 });
    }
  }
  return { events, lines: kept, undecodable };
}
