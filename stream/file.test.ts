/**
 * Files read as one input: one file's lines in order, several merged by event time, each file's own
 * bad lines named by file and line.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { FileTransport } from './file.js';
import type { Delivery } from './transport.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-file-transport-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function readAll(t: FileTransport) {
  const got: Delivery[] = [];
  await t.consume(async (d) => {
    got.push(d);
  });
  await t.drain();
  return got;
}

describe('FileTransport over one file', () => {
  // Editors on Windows (Notepad, PowerShell's Out-File -Encoding utf8) start a UTF-8 file with a
  // byte-order mark; the merged read and Kafka/HTTP batches trim it, so one file's read does too.
  it('reads a first line that starts with a byte-order mark as the event it is', async () => {
    const file = join(dir, 'bom.jsonl');
    const lines = [1000, 2000].map((ts) => JSON.stringify({ kind: 'step', ts }));
    writeFileSync(file, `\ufeff${lines.join('\n')}\n`);
    const got = await readAll(new FileTransport({ path: file }));
    expect(got.flatMap((d) => d.undecodable)).toEqual([]);
    expect(got.flatMap((d) => d.events)).toEqual([
      { kind: 'step', ts: 1000 },
      { kind: 'step', ts: 2000 },
    ]);
    expect(got.flatMap((d) => d.lines)).toEqual(lines);
    expect(got.flatMap((d) => d.lineNumbers)).toEqual([1, 2]);
  });
});

describe('FileTransport over several files', () => {
  it('delivers their events in event-time order, ties in file order, whatever their sizes', async () => {
    const steps = join(dir, 'steps.jsonl');
    const colls = join(dir, 'collectives.jsonl.gz');
    writeFileSync(steps, [1000, 2000, 3000].map((ts) => JSON.stringify({ kind: 'step', ts })).join('\n'));
    writeFileSync(
      colls,
      gzipSync(
        `${[990, 1990, 2000, 2990, 5000].map((ts) => JSON.stringify({ kind: 'collective', ts })).join('\n')}\n`,
      ),
    );
    const t = new FileTransport({ path: steps, more: [colls], linesPerDelivery: 3 });
    expect(t.name).toBe(`${steps} + ${colls}`);
    const got = await readAll(t);
    const events = got.flatMap((d) => d.events as { kind: string; ts: number }[]);
    expect(events.map((e) => `${e.kind[0]}${e.ts}`)).toEqual([
      'c990',
      's1000',
      'c1990',
      's2000',
      'c2000',
      'c2990',
      's3000',
      'c5000',
    ]);
    expect(got.map((d) => d.events.length)).toEqual([3, 3, 2]);
    // Each event keeps its own file's line number.
    expect(got.flatMap((d) => d.lineNumbers)).toEqual([1, 1, 2, 2, 3, 4, 3, 5]);
  });

  it('says which file a line that is not JSON came from; a missing file is refused before reading', async () => {
    const a = join(dir, 'a.jsonl');
    const b = join(dir, 'b.jsonl');
    writeFileSync(a, `${JSON.stringify({ ts: 1 })}\n{cut\n${JSON.stringify({ ts: 3 })}\n`);
    writeFileSync(b, `${JSON.stringify({ ts: 2 })}\n`);
    const got = await readAll(new FileTransport({ path: a, more: [b] }));
    expect(got.flatMap((d) => (d.events as { ts: number }[]).map((e) => e.ts))).toEqual([1, 2, 3]);
    expect(got.flatMap((d) => d.undecodable)).toEqual([
      { raw: '{cut', reason: expect.stringMatching(new RegExp(`^${a}: not valid JSON`)), line: 2 },
    ]);
    await expect(
      new FileTransport({ path: a, more: [join(dir, 'none.jsonl')] }).consume(async () => {}),
    ).rejects.toThrow(/ENOENT: .*none\.jsonl/);
  });
});
