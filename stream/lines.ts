/**
 * Reading JSON lines fast, from a file or stdin, plain or gzip (by its first bytes): chunked reads
 * split on newline bytes, one await per 64 KB chunk rather than per line. The file transport reads
 * through it.
 */
import { isAscii } from 'node:buffer';
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { pipeline, Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { RankwatchError } from '../core/errors.js';

/**
 * Bytes per read. Small enough that a chunk's string is an ordinary young object that dies at the
 * next scavenge: a 1 MB chunk's latin1 string is an external string (over Node's ~1 MB limit) or,
 * from 128 KB, a large object, both freed only by a full GC. At 16k ranks, where the detectors'
 * state makes full GCs rarer, 1 MB chunks left ~40 MB of read chunks waiting for one (peak RSS
 * 220 MB at 16,384 ranks against 168 MB with 64 KB chunks; replay was no slower).
 */
const CHUNK_BYTES = 64 * 1024;

/** gzip's magic bytes: input is read through gunzip when it starts with them, whatever its name. */
const GZIP_MAGIC = [0x1f, 0x8b];

const NEWLINE = 0x0a;

/**
 * The bytes of stdin, or of a gzip file (`head`: its first read), gunzipped when they start with
 * gzip's magic bytes.
 */
async function* bytesOf(path: string, fd: number | undefined, head?: Buffer): AsyncGenerator<Buffer> {
  const it: AsyncIterator<Buffer> =
    fd === undefined
      ? (process.stdin[Symbol.asyncIterator]() as AsyncIterator<Buffer>)
      : (async function* () {
          if (head) yield head;
          for (;;) {
            const buf = Buffer.allocUnsafe(CHUNK_BYTES);
            const read = readSync(fd, buf, 0, CHUNK_BYTES, null);
            if (read === 0) return;
            yield buf.subarray(0, read);
          }
        })();
  const first = await it.next();
  if (first.done) return;
  if (!isGzip(first.value, first.value.length)) {
    yield first.value;
    for (let n = await it.next(); !n.done; n = await it.next()) yield n.value;
    return;
  }
  async function* all(): AsyncGenerator<Buffer> {
    yield first.value;
    for (let n = await it.next(); !n.done; n = await it.next()) yield n.value;
  }
  const gunzip = pipeline(Readable.from(all()), createGunzip(), () => {});
  try {
    for await (const chunk of gunzip as AsyncIterable<Buffer>) yield chunk;
  } catch (err) {
    throw new RankwatchError(
      'RANKWATCH_ERR_INPUT',
      `${path}: the gzip data is damaged or cut off (${(err as Error).message}); the lines before it were read`,
    );
  }
}

const isGzip = (b: Buffer, n: number): boolean => n >= 2 && b[0] === GZIP_MAGIC[0] && b[1] === GZIP_MAGIC[1];

/**
 * The lines of the bytes up to `end`, a newline byte or the end of the input, so a UTF-8
 * character is never cut. Event lines are ASCII (non-ASCII only inside
 * messages): a latin1 copy is ~5x faster than UTF-8 decoding, and the same for ASCII bytes.
 */
function linesOf(bytes: Buffer, end: number, first: number): LineChunk {
  if (!isAscii(bytes.subarray(0, end))) return { first, lines: bytes.toString('utf8', 0, end).split('\n') };
  return { first, lines: bytes.toString('latin1', 0, end).split('\n'), bytes };
}

/**
 * Whether `trim` may change the line: a CR (CRLF files), spaces, a byte-order mark or other
 * whitespace beyond ASCII at either end, none of it part of the event. Only the two end characters
 * are looked at, so an ordinary line (`{`…`}`) costs two comparisons. Every reader of JSON lines
 * (one file, several merged, Kafka/HTTP batches) asks this, so they trim alike.
 */
export function mayBePadded(line: string): boolean {
  const a = line.charCodeAt(0);
  const z = line.charCodeAt(line.length - 1);
  return a <= 32 || a >= 0x80 || z <= 32 || z >= 0x80;
}

/**
 * Lines of text, the first numbered `first`. `bytes`, when the text is ASCII, are its bytes (one
 * per character; line i starts after the lines before it and their newlines), for a reader that
 * is faster on bytes (stream/scan.ts); they are the reader's and change once the next chunk is
 * asked for.
 */
export type LineChunk = { first: number; lines: string[]; bytes?: Buffer };

/**
 * Yields the lines of a file (or stdin for "-"; plain or gzip) a chunk at a time, with the number of
 * the first line: one await per chunk rather than per line, which is what makes replay fast.
 * Each chunk is cut at its last newline byte and the bytes after it are carried into the next, so
 * every chunk's text starts and ends on a line edge and no line is glued from two strings.
 */
export async function* readLineChunks(path: string): AsyncGenerator<LineChunk> {
  const fd = path === '-' ? undefined : openSync(path, 'r');
  try {
    if (fd !== undefined && fstatSync(fd).isDirectory()) {
      throw Object.assign(new Error(`EISDIR: ${path} is a directory`), { code: 'EISDIR', path });
    }
    if (fd !== undefined) {
      const buf = Buffer.allocUnsafe(CHUNK_BYTES);
      const read = readSync(fd, buf, 0, CHUNK_BYTES, null);
      if (!isGzip(buf, read)) {
        yield* plainFileLines(fd, buf, read);
        return;
      }
      yield* splitLines(bytesOf(path, fd, buf.subarray(0, read)));
      return;
    }
    yield* splitLines(bytesOf(path, fd));
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * A plain file's lines, read synchronously into one reused buffer: each read lands after the
 * unfinished line the previous one left (moved to the buffer's start), so no read is copied into
 * a new buffer. 64 KB from the page cache takes microseconds, while handing every read to libuv's
 * thread pool and back cost replay ~20% more CPU than the plain loop it is measured against
 * (bench/replay.bench.ts), and a new buffer per read, with the carried bytes, ~3% more.
 */
function* plainFileLines(fd: number, first: Buffer, firstRead: number): Generator<LineChunk> {
  let buf = first;
  let end = firstRead; // bytes held: an unfinished line, then the last read
  let next = 1;
  for (let read = firstRead; read > 0; ) {
    const last = buf.lastIndexOf(NEWLINE, end - 1);
    if (last >= 0) {
      const chunk = linesOf(buf, last, next);
      yield chunk;
      next += chunk.lines.length;
      buf.copy(buf, 0, last + 1, end);
      end -= last + 1;
    }
    // A line longer than the buffer: it grows until the line's end comes.
    if (end === buf.length) buf = Buffer.concat([buf, Buffer.allocUnsafe(buf.length)]);
    read = readSync(fd, buf, end, buf.length - end, null);
    end += read;
  }
  if (end > 0) yield linesOf(buf, end, next);
}

/** The lines of stdin or of gunzipped bytes, a chunk of them per chunk of bytes. */
async function* splitLines(bytes: AsyncIterable<Buffer>): AsyncGenerator<LineChunk> {
  let carry: Buffer[] = []; // copies: the chunks are not ours to keep
  let next = 1;
  for await (const read of bytes) {
    const last = read.lastIndexOf(NEWLINE);
    if (last < 0) {
      carry.push(Buffer.from(read)); // a line longer than a read: joined once its end comes
      continue;
    }
    const bytes = carry.length === 0 ? read : Buffer.concat([...carry, read]);
    const end = bytes.length - (read.length - last); // the last newline's place in `bytes`
    const chunk = linesOf(bytes, end, next);
    carry = last + 1 < read.length ? [Buffer.from(read.subarray(last + 1))] : [];
    yield chunk;
    next += chunk.lines.length;
  }
  if (carry.length > 0) {
    const bytes = Buffer.concat(carry);
    yield linesOf(bytes, bytes.length, next);
  }
}
