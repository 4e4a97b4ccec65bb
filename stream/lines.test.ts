import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { readLineChunks } from './lines.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-jsonl-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function lines(path: string): Promise<string[]> {
  const out: string[] = [];
  for await (const { first, lines } of readLineChunks(path)) {
    expect(first).toBe(out.length + 1);
    out.push(...lines);
  }
  return out;
}

describe('readLineChunks', () => {
  // Reads come in 64 KB chunks: lines and multi-byte characters cut at a chunk edge must come out whole.
  const ascii = Array.from(
    { length: 30_000 },
    (_, i) => `{"v":1,"kind":"step","rank":${i},"pad":"${'x'.repeat(i % 50)}"}`,
  );
  const text = (extra: string) => {
    const ls = [...ascii];
    for (let i = 0; i < ls.length; i += 997) ls[i] = `{"message":"${extra}${i}"}`;
    return ls;
  };

  it('gives back every line of a plain ASCII file, the last one without a newline too', async () => {
    const path = join(dir, 'ascii.jsonl');
    writeFileSync(path, ascii.join('\n'));
    expect(await lines(path)).toEqual(ascii);
  });

  it('keeps UTF-8 characters whole across chunk edges, in chunks that mix with ASCII-only ones', async () => {
    // A 3-byte character (an em dash, as in NVIDIA's XID messages) starts on the last byte of the
    // first 1 MB chunk; further chunks are ASCII-only, then UTF-8 again.
    const head = '{"m":"';
    const astride = `${head}${'y'.repeat((1 << 20) - 1 - head.length)}—"}`;
    expect(Buffer.from(astride).indexOf('—')).toBe((1 << 20) - 1);
    const want = [astride, ...ascii, ...text('Xid 79 — GPU has fallen off the bus ✓ 日本 ')];
    const path = join(dir, 'utf8.jsonl');
    writeFileSync(path, `${want.join('\n')}\n`);
    expect(await lines(path)).toEqual(want);
  });

  it('reads gzip and CRLF input as it reads plain', async () => {
    const path = join(dir, 'crlf.jsonl.gz');
    const body = `${text('é').join('\r\n')}\r\n`;
    writeFileSync(path, gzipSync(body));
    expect(await lines(path)).toEqual(body.split('\n').slice(0, -1));
  });

  it('gives back lines longer than a read, a character astride every read edge, and empty input as it is', async () => {
    // Lines of 100 KB and 300 KB (past one and several 64 KB reads), and 2-byte characters on
    // every byte offset, so one falls across each edge whatever the reads' sizes.
    const long = [`{"m":"${'z'.repeat(100_000)}"}`, `{"m":"${'é'.repeat(150_000)}"}`];
    const want = [...long, ...text('é'), '', ...long.reverse(), '{"last":1}'];
    const path = join(dir, 'long.jsonl');
    writeFileSync(path, want.join('\n'));
    expect(await lines(path)).toEqual(want);
    writeFileSync(path, '');
    expect(await lines(path)).toEqual([]);
    writeFileSync(path, '\n');
    expect(await lines(path)).toEqual(['']);
  });
});
