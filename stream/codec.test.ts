import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { decodeBatch, encodeBatch, inflateText, MAX_INFLATED_BYTES } from './codec.js';

describe('batch codec', () => {
  const events = [
    { v: 1, kind: 'gpu', ts: 1, host: 'h', note: 'a\nb "q"' },
    { v: 1, kind: 'step', ts: 2 },
  ];

  it('round-trips plain and gzip JSON lines', () => {
    expect(decodeBatch(encodeBatch(events)).events).toEqual(events);
    const gz = encodeBatch(events, true);
    expect(gz[0]).toBe(0x1f);
    expect(decodeBatch(gz).events).toEqual(events);
  });

  it('keeps good lines around a bad one and says which line was bad', () => {
    const d = decodeBatch('{"a":1}\n{"a":\n\n {"a": 3}\t\n');
    expect(d.events).toEqual([{ a: 1 }, { a: 3 }]);
    // Each event keeps the text it came from (trimmed), aligned with `events`: it is stored as raw.
    expect(d.lines).toEqual(['{"a":1}', '{"a": 3}']);
    // And the line it was on, past the bad and the blank line, for replies that name lines.
    expect(d.at).toEqual([1, 4]);
    expect(d.undecodable).toHaveLength(1);
    expect(d.undecodable[0]).toMatchObject({ line: 2, raw: '{"a":' });
    expect(d.undecodable[0].reason).toMatch(/not valid JSON/);
  });

  it('refuses gzip that inflates past the limit, without inflating it all', () => {
    const bomb = gzipSync(Buffer.alloc(4 << 20, 0x20));
    expect(inflateText(bomb, 1 << 20)).toEqual({
      error: 'gzip body inflates past 1048576 bytes; send smaller batches',
      tooLarge: true,
    });
    expect(inflateText(gzipSync('{"a":1}\n'), 1 << 20)).toEqual({ text: '{"a":1}\n' });
    expect(decodeBatch(gzipSync(Buffer.alloc(MAX_INFLATED_BYTES + 1, 0x20))).undecodable[0].reason).toMatch(
      /inflates past/,
    );
  });

  it('reports broken gzip instead of throwing', () => {
    const d = decodeBatch(Buffer.from([0x1f, 0x8b, 1, 2, 3]));
    expect(d.events).toEqual([]);
    expect(d.undecodable[0].reason).toMatch(/not valid gzip/);
  });
});
