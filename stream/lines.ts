/**
 * Reading JSON lines fast, from a file or stdin, plain or gzip (by its first bytes): chunked reads
 * split by hand, one await per 64 KB chunk rather than per line. The file transport reads through it.
 */
import { isAscii } from 'node:buffer';
import { createReadStream, statSync } from 'node:fs';
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

/** The bytes of a file (or stdin for "-"), gunzipped when they start with gzip's magic bytes. */
async function* bytesOf(path: string): AsyncGenerator<Buffer> {
  if (path !== '-' && statSync(path).isDirectory()) {
    throw Object.assign(new Error(`EISDIR: ${path} is a directory`), { code: 'EISDIR', path });
  }
  const raw: Readable = path === '-' ? process.stdin : createReadStream(path, { highWaterMark: CHUNK_BYTES });
  const it = raw[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  const first = await it.next();
  if (first.done) return;
  const head = first.value;
  async function* all(): AsyncGenerator<Buffer> {
    yield head;
    for (let n = await it.next(); !n.done; n = await it.next()) yield n.value;
  }
  if (head[0] !== GZIP_MAGIC[0] || head[1] !== GZIP_MAGIC[1]) {
    yield* all();
    return;
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

/**
 * Yields the lines of a file (or stdin for "-"; plain or gzip) a chunk at a time, with the number of
 * the first line: one await per chunk rather than per line, which is what makes replay fast.
 */
export async function* readLineChunks(path: string): AsyncGenerator<{ first: number; lines: string[] }> {
  const text = new TextDecoder();
  let rest = '';
  let next = 1;
  for await (const bytes of bytesOf(path)) {
    // Event lines are ASCII (non-ASCII only inside messages): a latin1 copy is ~5x faster than
    // UTF-8 decoding. Bytes a previous UTF-8 chunk left pending decode as TextDecoder would.
    const chunk = isAscii(bytes)
      ? text.decode() + bytes.toString('latin1')
      : text.decode(bytes, { stream: true });
    // Split the chunk alone and glue the carried-over part to its first line: splitting
    // `rest + chunk` flattens a 1 MB string first, which costs more than the split.
    const lines = chunk.split('\n');
    lines[0] = rest + lines[0];
    rest = lines.pop() ?? '';
    yield { first: next, lines };
    next += lines.length;
  }
  rest += text.decode();
  if (rest) yield { first: next, lines: [rest] };
}
