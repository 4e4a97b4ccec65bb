/**
 * The streaming read of an ingest body on its own: bodies cut into small chunks anywhere (inside a
 * line, inside a UTF-8 character, inside the gzip header) read as the whole body does; each limit
 * refuses with its reason and gives back what it took; parsing a long body takes many turns of the
 * event loop. Real gzip, real streams.
 */
import { Readable } from 'node:stream';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { readIngestBody } from './ingest-body.js';
import { IngestBudget } from './ingest-limits.js';

const gpu = (i: number, host = 'gpu-0001') =>
  JSON.stringify({
    v: 1,
    kind: 'gpu',
    ts: 1_764_480_000_000 + i,
    host,
    gpu: i % 8,
    sm_clock_mhz: 1980,
    throttle_reasons: 0,
  });

/** The bytes as a stream of `size`-byte chunks, each in a turn of its own (as a socket gives them). */
function chunked(bytes: Buffer, size: number): Readable {
  const parts: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += size) parts.push(bytes.subarray(i, i + size));
  return Readable.from(parts);
}

describe('readIngestBody', () => {
  it('reads a body cut anywhere as the whole body: line numbers, CRLF, UTF-8 split across chunks', async () => {
    const lines = [gpu(0, 'gpu-é1'), '', `${gpu(1)}\r`, '{"v":1,', `  ${gpu(2, '节点-7')}\t`, gpu(3)];
    const text = Buffer.from(lines.join('\n'));
    for (const body of [text, gzipSync(text)]) {
      for (const size of [1, 3, 7, 64, body.length]) {
        const r = await readIngestBody(chunked(body, size));
        if (!r.ok) throw new Error(r.message);
        expect(r.good.map((e) => (e as { host: string }).host)).toEqual([
          'gpu-é1',
          'gpu-0001',
          '节点-7',
          'gpu-0001',
        ]);
        expect(r.lines).toEqual([lines[0], lines[2].trim(), lines[4].trim(), lines[5]]);
        expect(r.rejected).toBe(1);
        expect(r.errors).toEqual([{ line: 4, reason: expect.stringMatching(/^not valid JSON: /) }]);
      }
    }
  });

  it('a line longer than many chunks is one line', async () => {
    const long = JSON.stringify({
      v: 1,
      kind: 'fault',
      ts: 1,
      host: 'h',
      source: 'xid',
      message: 'x'.repeat(200_000),
    });
    const r = await readIngestBody(chunked(gzipSync(`${long}\n${gpu(1)}`), 1000));
    expect(r.ok && r.lines).toEqual([long, gpu(1)]);
  });

  it('refuses past the events of a request (blank lines aside, bad lines counted) and gives back its bytes', async () => {
    const budget = new IngestBudget(1 << 20);
    const limits = { maxEvents: 3 };
    const three = `${gpu(0)}\n\n${gpu(1)}\nnot json\n\n`;
    const ok = await readIngestBody(Readable.from([Buffer.from(three)]), { limits, budget });
    expect(ok).toMatchObject({ ok: true, rejected: 1 });
    expect(budget.bytes()).toBe(three.length);
    if (ok.ok) ok.release();
    expect(budget.bytes()).toBe(0);
    const four = gzipSync(`${three}${gpu(3)}\n`);
    expect(await readIngestBody(chunked(four, 5), { limits, budget })).toEqual({
      ok: false,
      status: 413,
      code: 'RANKWATCH_ERR_INGEST_TOO_LARGE',
      message:
        'body holds more than 3 events, the most one request may send: split it into batches of at most 3; nothing of it was accepted',
    });
    expect(budget.bytes()).toBe(0);
    expect(budget.refused).toEqual({ too_large: 1, busy: 0 });
  });

  it('refuses past the bytes of a request, as sent and once gunzipped', async () => {
    const text = Buffer.from(`${Array.from({ length: 100 }, (_, i) => gpu(i)).join('\n')}\n`);
    const limits = { maxInflatedBytes: 4096, maxBodyBytes: 2048 };
    expect(await readIngestBody(chunked(gzipSync(text), 100), { limits })).toMatchObject({
      ok: false,
      status: 413,
      message:
        'gzip body inflates past 4096 bytes, the most one request may hold: split it into smaller batches; nothing of it was accepted',
    });
    // Plain: the bytes as sent pass their own limit first.
    expect(await readIngestBody(chunked(text, 512), { limits })).toMatchObject({
      ok: false,
      status: 413,
      close: true,
      message:
        'request body is over the 2048 byte limit: gzip it or split it into smaller batches; nothing of it was accepted',
    });
    // Its one chunk alone over it too.
    expect(await readIngestBody(chunked(text, text.length), { limits })).toMatchObject({
      status: 413,
      close: true,
      message: expect.stringMatching(/^request body is over the 2048 byte limit/),
    });
    // A declared length over the limit is refused before a byte is read.
    const untouched = chunked(text, 512);
    expect(await readIngestBody(untouched, { limits, declaredBytes: text.length })).toMatchObject({
      status: 413,
    });
    expect(untouched.readableDidRead).toBe(false);
  });

  it('answers 429 while the budget is held by others, and never asks a request to wait for more than all of it', async () => {
    const budget = new IngestBudget(8192);
    const body = Buffer.from(`${Array.from({ length: 40 }, (_, i) => gpu(i)).join('\n')}\n`); // ~4.6 KB
    const first = await readIngestBody(Readable.from([body]), { budget });
    expect(first.ok).toBe(true);
    expect(await readIngestBody(Readable.from([body]), { budget })).toEqual({
      ok: false,
      status: 429,
      code: 'RANKWATCH_ERR_INGEST_BUSY',
      retryAfterS: 1,
      message:
        'ingest is busy: requests in flight hold the 8192 bytes this server takes at once; nothing of this one was accepted, send it again in 1 s',
    });
    expect(budget.bytes()).toBe(body.length);
    if (first.ok) first.release();
    const again = await readIngestBody(Readable.from([body]), { budget });
    expect(again.ok).toBe(true);
    if (again.ok) again.release();
    // Twice the budget: a 413 (split it), not a 429 the client would retry for ever.
    const twice = Buffer.concat([body, body]);
    expect(await readIngestBody(Readable.from([twice]), { budget })).toMatchObject({
      status: 413,
      message: expect.stringMatching(/^body is past 8192 bytes, the most one request may hold/),
    });
    expect(budget.bytes()).toBe(0);
    expect(budget.refused).toEqual({ too_large: 1, busy: 1 });
  });

  it('broken gzip is a 400 that says so', async () => {
    const cut = gzipSync(`${gpu(1)}\n${gpu(2)}\n`).subarray(0, 20);
    expect(await readIngestBody(chunked(cut, 4))).toMatchObject({
      ok: false,
      status: 400,
      message: expect.stringMatching(/^body: not valid gzip: /),
    });
  });

  it('gives the event loop back while it parses: a body of one chunk takes many turns', async () => {
    const body = Buffer.from(`${Array.from({ length: 20_000 }, (_, i) => gpu(i)).join('\n')}\n`);
    let turns = 0;
    let reading = true;
    const count = async () => {
      while (reading) {
        await nextTurn();
        turns++;
      }
    };
    const counting = count();
    // sliceMs 0: a turn every 256 lines, whatever the machine's speed.
    const r = await readIngestBody(Readable.from([body]), { sliceMs: 0 });
    reading = false;
    await counting;
    expect(r.ok && r.good.length).toBe(20_000);
    expect(turns).toBeGreaterThanOrEqual(Math.floor(20_000 / 256) - 1);
  });
});
