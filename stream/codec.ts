/**
 * How a batch of events travels as bytes (Kafka message values, HTTP ingest bodies): JSON lines,
 * optionally gzip-compressed. Decoding never throws: a line that is not JSON comes back in
 * `undecodable` with its line number and reason, and the good lines around it are kept.
 */
import { isAscii } from 'node:buffer';
import { gunzipSync, gzipSync } from 'node:zlib';
import { mayBePadded } from './lines.js';
import { learn, scanLine } from './scan.js';

export interface Decoded {
  events: unknown[];
  /** The text each event was parsed from, aligned with `events` (stored as the raw event). */
  lines: string[];
  /** The line number (from 1) each event was on, aligned with `events`. */
  at: number[];
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

/** Largest body a gzip batch may inflate to: a few kilobytes of gzip can inflate to gigabytes. */
export const MAX_INFLATED_BYTES = 256 << 20;

/**
 * The bytes as text, gunzipped first when they start with the gzip magic number; or why not:
 * broken gzip, or a body that inflates past `maxBytes` (`tooLarge`).
 */
export function inflateText(
  body: Uint8Array,
  maxBytes = MAX_INFLATED_BYTES,
): { text: string } | { error: string; tooLarge: boolean } {
  if (!isGzip(body))
    return { text: Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8') };
  try {
    return { text: gunzipSync(body, { maxOutputLength: maxBytes }).toString('utf8') };
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE'
      ? { error: `gzip body inflates past ${maxBytes} bytes; send smaller batches`, tooLarge: true }
      : { error: `not valid gzip: ${(err as Error).message}`, tooLarge: false };
  }
}

/**
 * Decodes JSON lines, gunzipping first when the bytes start with the gzip magic number. Lines of a
 * shape seen before are read from their bytes (stream/scan.ts) when the body is ASCII, as replay
 * reads a file's: exactly the object JSON.parse gives.
 */
export function decodeBatch(body: Uint8Array | string): Decoded {
  let text: string;
  let bytes: Buffer | undefined;
  if (typeof body === 'string') text = body;
  else if (!isGzip(body) && isAscii(body)) {
    // Nearly every batch: its latin1 text is its UTF-8 text, made faster, and its bytes scan.
    bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    text = bytes.toString('latin1');
  } else {
    const t = inflateText(body);
    if ('error' in t)
      return { events: [], lines: [], at: [], undecodable: [{ raw: '', reason: t.error, line: 0 }] };
    text = t.text;
  }
  const events: unknown[] = [];
  const kept: string[] = [];
  const at: number[] = [];
  const undecodable: Decoded['undecodable'] = [];
  const lines = text.split('\n');
  for (let i = 0, from = 0; i < lines.length; from += lines[i].length + 1, i++) {
    let line = lines[i];
    let value: unknown;
    // Whitespace around a line (a CR, a byte-order mark…) is not part of the event.
    if (mayBePadded(line)) line = line.trim();
    else if (bytes !== undefined) value = scanLine(line, bytes, from);
    if (!line) continue;
    if (value === undefined) {
      try {
        value = JSON.parse(line);
      } catch (err) {
        undecodable.push({ raw: line, reason: `not valid JSON: ${(err as Error).message}`, line: i + 1 });
        continue;
      }
      learn(value);
    }
    events.push(value);
    kept.push(line);
    at.push(i + 1);
  }
  return { events, lines: kept, at, undecodable };
}
