import { appendFileSync, mkdtempSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { FileTail } from './tail.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-tail-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function tail(path: string, from: 'start' | 'end', partialFlushMs?: number) {
  const lines: string[] = [];
  const errors: unknown[] = [];
  const notices: string[] = [];
  const t = new FileTail(
    { path, from, pollMs: 10_000, partialFlushMs },
    { onLines: (l) => lines.push(...l), onError: (e) => errors.push(e), onNotice: (m) => notices.push(m) },
  );
  return { t, lines, errors, notices };
}

describe('FileTail', () => {
  it('reads only complete lines, from the end on first open when asked', async () => {
    const p = join(dir, 'a.log');
    writeFileSync(p, 'old 1\nold 2\n');
    const { t, lines } = tail(p, 'end');
    await t.poll();
    appendFileSync(p, 'new 1\nnew ');
    await t.poll();
    expect(lines).toEqual(['new 1']);
    appendFileSync(p, '2\r\n');
    await t.poll();
    expect(lines).toEqual(['new 1', 'new 2']);
    await t.stop();
  });

  it('follows rotation: the old file to its end, then the new one from its start', async () => {
    const p = join(dir, 'b.log');
    writeFileSync(p, 'one\n');
    const { t, lines, notices } = tail(p, 'start');
    await t.poll();
    appendFileSync(p, 'two\n');
    renameSync(p, `${p}.1`);
    writeFileSync(p, 'three\n');
    await t.poll();
    await t.poll();
    expect(lines).toEqual(['one', 'two', 'three']);
    expect(notices.some((n) => /rotated/.test(n))).toBe(true);
    await t.stop();
  });

  it('reads on stop what was written since the last poll (a path renamed away before the new file came)', async () => {
    const p = join(dir, 'g.log');
    writeFileSync(p, 'one\n');
    const { t, lines } = tail(p, 'start');
    await t.poll();
    appendFileSync(p, 'two\n');
    renameSync(p, `${p}.1`);
    await t.stop();
    expect(lines).toEqual(['one', 'two']);
  });

  it('starts over after truncation (copytruncate)', async () => {
    const p = join(dir, 'c.log');
    writeFileSync(p, 'aaaaaaaaaa\nbbbbbbbbbb\n');
    const { t, lines, notices } = tail(p, 'start');
    await t.poll();
    truncateSync(p, 0);
    appendFileSync(p, 'c\n');
    await t.poll();
    expect(lines).toEqual(['aaaaaaaaaa', 'bbbbbbbbbb', 'c']);
    expect(notices.some((n) => /truncated/.test(n))).toBe(true);
    await t.stop();
  });

  it('reports a missing file once, then reads it from the start when it appears', async () => {
    const p = join(dir, 'late.log');
    const { t, lines, errors } = tail(p, 'end');
    await t.poll();
    await t.poll();
    expect(errors).toHaveLength(1);
    writeFileSync(p, 'first\n');
    await t.poll();
    expect(lines).toEqual(['first']);
    await t.stop();
  });

  it('reads a last line without its newline once the file stops growing, and on stop', async () => {
    const p = join(dir, 'cut.log');
    writeFileSync(p, 'first\r\nlast, cut sho');
    const idle = tail(p, 'start', 0);
    await idle.t.poll();
    expect(idle.lines).toEqual(['first']);
    await idle.t.poll();
    expect(idle.lines).toEqual(['first', 'last, cut sho']);
    await idle.t.stop();
    expect(idle.lines).toHaveLength(2);

    const waiting = tail(p, 'start', 60_000);
    await waiting.t.poll();
    await waiting.t.poll();
    expect(waiting.lines).toEqual(['first']);
    await waiting.t.stop();
    expect(waiting.lines).toEqual(['first', 'last, cut sho']);
  });
});
