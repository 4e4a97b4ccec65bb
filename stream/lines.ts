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
 * A file's bytes, read into one reused buffer (no Buffer per read for the GC to collect), each
 * read synchronous: 64 KB from the page cache takes microseconds, while handing every read to
 * libuv's thread pool and back cost replay ~20% more CPU than the plain loop it is measured
 * against (bench/replay.bench.ts), and left it idle between reads on a busy machine.
 */
function* fileBytes(fd: number): Generator<Buffer> {
  const buf = Buffer.allocUnsafe(CHUNK_BYTES);
  for (;;) {
    const read = readSync(fd, buf, 0, CHUNK_BYTES, null);
    if (read === 0) return;
    yield buf.subarray(0, read);
  }
}

/** The bytes of a file (or stdin for "-"), gunzipped when they start with gzip's magic bytes. */
async function* bytesOf(path: string): AsyncGenerator<Buffer> {
  const fd = path === '-' ? undefined : openSync(path, 'r');
  try {
    if (fd !== undefined && fstatSync(fd).isDirectory()) {
      throw Object.assign(new Error(`EISDIR: ${path} is a directory`), { code: 'EISDIR', path });
    }
    const it: Iterator<Buffer> | AsyncIterator<Buffer> =
      fd === undefined ? (process.stdin[Symbol.asyncIterator]() as AsyncIterator<Buffer>) : fileBytes(fd);
    const first = await it.next();
    if (first.done) return;
    const head = first.value;
    if (head[0] !== GZIP_MAGIC[0] || head[1] !== GZIP_MAGIC[1]) {
      yield head;
      for (let n = await it.next(); !n.done; n = await it.next()) yield n.value;
      return;
    }
    // The reused read buffer is overwritten by the next read: gunzip gets its own copy.
    const own = (b: Buffer) => (fd === undefined ? b : Buffer.from(b));
    async function* owned(): AsyncGenerator<Buffer> {
      yield own(head);
      for (let n = await it.next(); !n.done; n = await it.next()) yield own(n.value);
    }
    const gunzip = pipeline(Readable.from(owned()), createGunzip(), () => {});
    try {
      for await (const chunk of gunzip as AsyncIterable<Buffer>) yield chunk;
    } catch (err) {
      throw new RankwatchError(
        'RANKWATCH_ERR_INPUT',
        `${path}: the gzip data is damaged or cut off (${(err as Error).message}); the lines before it were read`,
      );
    }
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * Text of whole lines: the bytes up to `end`, a newline byte or the end of the input, so a UTF-8
 * character is never cut. Event lines are ASCII (non-ASCII only inside
 * messages): a latin1 copy is ~5x faster than UTF-8 decoding, and the same for ASCII bytes.
 */
const textOf = (bytes: Buffer, end: number): string =>
  isAscii(bytes.subarray(0, end)) ? bytes.toString('latin1', 0, end) : bytes.toString('utf8', 0, end);

/**
 * Yields the lines of a file (or stdin for "-"; plain or gzip) a chunk at a time, with the number of
 * the first line: one await per chunk rather than per line, which is what makes replay fast.
 * Each chunk is cut at its last newline byte and the bytes after it are carried into the next, so
 * every chunk's text starts and ends on a line edge and no line is glued from two strings.
 */
export async function* readLineChunks(path: string): AsyncGenerator<{ first: number; lines: string[] }> {
  let carry: Buffer[] = []; // copies: a read may be the reader's reused buffer
  let next = 1;
  for await (const read of bytesOf(path)) {
    const last = read.lastIndexOf(NEWLINE);
    if (last < 0) {
      carry.push(Buffer.from(read)); // a line longer than a read: joined once its end comes
      continue;
    }
    const bytes = carry.length === 0 ? read : Buffer.concat([...carry, read]);
    const end = bytes.length - (read.length - last); // the last newline's place in `bytes`
    const lines = textOf(bytes, end).split('\n');
    carry = last + 1 < read.length ? [Buffer.from(read.subarray(last + 1))] : [];
    yield { first: next, lines };
    next += lines.length;
  }
  if (carry.length > 0) {
    const bytes = Buffer.concat(carry);
    yield { first: next, lines: [textOf(bytes, bytes.length)] };
  }
}
