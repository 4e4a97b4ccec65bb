/**
 * How the disk spool (and so `rankwatch up`'s write-ahead log) lays batches out in its segment
 * files. A record is self-delimiting and checkable:
 *
 *   RS, CRC-32 of the payload (8 hex digits), SP, payload length in bytes, SP, payload, LF
 *   \x1e5b1e0b6f 93 {"key":"j1"}\n{"v":1,"kind":"step",…}\n{"v":1,"kind":"step",…}\n
 *
 * The payload is JSON lines: a header with the batch's key, then each event as the text it
 * arrived in, so a replayed event is stored as the same raw text (the store keeps one copy of it).
 * RS (0x1E) cannot occur in JSON text (control characters are escaped inside strings and are not
 * whitespace), so every RS in a segment starts a record or a torn prefix of one. A reader that
 * meets anything but a whole record whose CRC matches skips to the next RS: a torn write costs
 * only itself, never a record after it. The framing is RFC 7464's (JSON text sequences) with a
 * length and a checksum added.
 *
 * Segments of the format before (`.jsonl`, one batch per JSON line) are still read; nothing is
 * appended to them.
 */
import { type FileHandle, open } from 'node:fs/promises';
import { crc32 } from 'node:zlib';
import type { Batch } from './transport.js';

export type SegmentFormat = 'rec' | 'jsonl';

/** A record, or a run of bytes that is none (torn or corrupt: `batch` absent), at `offset`. */
export interface ScannedRecord {
  offset: number;
  bytes: number;
  batch?: Batch;
}

const RS = 0x1e;
const LF = 0x0a;
const SP = 0x20;
/** RS, 8 hex digits, SP, up to 16 digits, SP. */
const HEADER_MAX = 27;
const NEWLINE = Buffer.from('\n');

/** The records for `batches`, ready to append, and each one's size. */
export function encodeRecords(batches: Batch[]): { data: Buffer; sizes: number[] } {
  const parts: Buffer[] = [];
  const sizes: number[] = [];
  for (const b of batches) {
    const payload = Buffer.from(payloadOf(b));
    const head = Buffer.from(
      `\x1e${crc32(payload).toString(16).padStart(8, '0')} ${payload.length} `,
      'latin1',
    );
    parts.push(head, payload, NEWLINE);
    sizes.push(head.length + payload.length + 1);
  }
  return { data: Buffer.concat(parts), sizes };
}

/** The key's header line, then one line per event: the text it arrived in when the batch kept it. */
function payloadOf(b: Batch): string {
  const kept = b.lines?.length === b.events.length ? b.lines : undefined;
  // JSON.stringify escapes newlines and RS inside strings, so the header stays one line.
  let text = JSON.stringify(
    b.undecodable?.length ? { key: b.key, undecodable: b.undecodable } : { key: b.key },
  );
  for (let i = 0; i < b.events.length; i++) {
    const line = kept?.[i];
    // A kept line is one JSON text (so it holds neither); checked anyway, as framing rests on it.
    text +=
      line !== undefined && !line.includes('\n') && !line.includes('\x1e')
        ? `\n${line}`
        : `\n${JSON.stringify(b.events[i]) ?? 'null'}`;
  }
  return text;
}

function batchOfPayload(payload: Buffer): Batch | undefined {
  const lines = payload.toString('utf8').split('\n');
  let head: { key?: unknown; undecodable?: Batch['undecodable'] };
  try {
    head = JSON.parse(lines[0]) ?? {};
  } catch {
    return undefined;
  }
  const key = head.key;
  if (typeof key !== 'string') return undefined;
  const kept = lines.slice(1);
  // A whole record is a batch: a line that is no JSON (never written so) comes back as its text,
  // which the pipeline sets aside with a reason, so the batch count stays what the writer counted.
  const batch: Batch = { key, events: kept.map(parseOrText), lines: kept };
  if (Array.isArray(head.undecodable) && head.undecodable.length) batch.undecodable = head.undecodable;
  return batch;
}

function parseOrText(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch {
    return line;
  }
}

function batchOfLine(text: string): Batch | undefined {
  try {
    const b = JSON.parse(text) as Batch;
    return typeof b?.key === 'string' && Array.isArray(b.events) ? b : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The records of a segment file from `from` (a record boundary) to its end, in order, reading
 * `chunk` bytes at a time: memory holds one chunk or one record, whichever is larger, whatever
 * the file's size. A file that does not exist has none.
 */
export async function* scanSegment(
  file: string,
  format: SegmentFormat,
  from: number,
  chunk = 256 << 10,
): AsyncGenerator<ScannedRecord> {
  let fh: FileHandle;
  try {
    fh = await open(file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  try {
    const w = new Window(fh, from, (await fh.stat()).size, chunk);
    yield* format === 'rec' ? records(w) : lines(w);
  } finally {
    await fh.close();
  }
}

async function* records(w: Window): AsyncGenerator<ScannedRecord> {
  for (;;) {
    await w.want(HEADER_MAX);
    if (w.buf.length === 0) return;
    const h = w.buf[0] === RS ? header(w.buf) : undefined;
    const total = h ? h.size + h.len + 1 : 0;
    if (h && total <= w.left()) {
      await w.want(total);
      const payload = w.buf.subarray(h.size, h.size + h.len);
      if (w.buf[total - 1] === LF && crc32(payload) === h.crc) {
        const batch = batchOfPayload(payload);
        yield batch ? { offset: w.pos, bytes: total, batch } : { offset: w.pos, bytes: total };
        w.skip(total);
        continue;
      }
    }
    // Not a whole record here: skip to the next RS (the start of the next record, or of a torn one).
    const next = w.buf.indexOf(RS, 1);
    const n = next > 0 ? next : w.buf.length;
    yield { offset: w.pos, bytes: n };
    w.skip(n);
  }
}

/** A record header at buf[0] (RS): its CRC, payload length and own size; undefined when it is none. */
function header(buf: Buffer): { crc: number; len: number; size: number } | undefined {
  if (buf.length < 12 || buf[9] !== SP) return undefined;
  for (let i = 1; i < 9; i++) if (!isHex(buf[i])) return undefined;
  let len = 0;
  let i = 10;
  for (; i < buf.length && i < HEADER_MAX - 1 && buf[i] !== SP; i++) {
    if (buf[i] < 0x30 || buf[i] > 0x39) return undefined;
    len = len * 10 + (buf[i] - 0x30);
  }
  if (i === 10 || buf[i] !== SP) return undefined;
  return { crc: Number.parseInt(buf.toString('latin1', 1, 9), 16), len, size: i + 1 };
}

const isHex = (c: number) => (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66);

async function* lines(w: Window): AsyncGenerator<ScannedRecord> {
  for (;;) {
    await w.want(1);
    if (w.buf.length === 0) return;
    let nl = w.buf.indexOf(LF);
    while (nl < 0 && w.left() > w.buf.length) {
      const had = w.buf.length;
      await w.want(had + 1);
      nl = w.buf.indexOf(LF, had);
    }
    const end = nl < 0 ? w.buf.length : nl + 1;
    // A torn write from a crash, or a line that is not a batch: skipped.
    const batch = batchOfLine(w.buf.toString('utf8', 0, nl < 0 ? end : nl));
    yield batch ? { offset: w.pos, bytes: end, batch } : { offset: w.pos, bytes: end };
    w.skip(end);
  }
}

/** Bytes [pos, pos + buf.length) of a file, read forward a chunk at a time. */
class Window {
  buf: Buffer = Buffer.alloc(0);

  constructor(
    private readonly fh: FileHandle,
    public pos: number,
    private size: number,
    private readonly chunk: number,
  ) {}

  /** Bytes from `pos` to the end of the file. */
  left(): number {
    return Math.max(0, this.size - this.pos);
  }

  /** Makes `n` bytes available at `buf` (fewer at the end of the file). */
  async want(n: number): Promise<void> {
    while (this.buf.length < n && this.buf.length < this.left()) {
      const at = this.pos + this.buf.length;
      const len = Math.min(Math.max(this.chunk, n - this.buf.length), this.size - at);
      const b = Buffer.allocUnsafe(len);
      const { bytesRead } = await this.fh.read(b, 0, len, at);
      if (bytesRead === 0) {
        this.size = at; // the file is shorter than it was
        return;
      }
      const got = b.subarray(0, bytesRead);
      this.buf = this.buf.length > 0 ? Buffer.concat([this.buf, got]) : got;
    }
  }

  skip(n: number): void {
    this.buf = this.buf.subarray(n);
    this.pos += n;
  }
}
