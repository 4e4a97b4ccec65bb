import { describe, expect, it } from 'vitest';
import { table } from './table.js';

const summary =
  'rank 37 on gpu-0004/5 computes 21.3% slower than its stage peers (1261 vs 1039 ms, waits 307 vs 529 ms in collectives) and costs the job ~7% of its throughput.';
const head = ['type', 'where', 'cost', 'summary'];
const rows = [
  ['straggler', 'gpu-0004/5 rank 37', '7.0%', summary],
  ['throttle', 'gpu-0004/5', '6.1%', 'HW thermal slowdown'],
];
const width = (text: string) => Math.max(...text.split('\n').map((l) => l.length));

describe('table', () => {
  it('fits the terminal width it is given, wrapping the widest column and keeping the narrow ones whole', () => {
    const out = table(head, rows, 100);
    expect(width(out)).toBeLessThanOrEqual(100);
    expect(width(out)).toBeGreaterThan(90); // uses the room it has
    // Short columns keep their cells on one line; the summary wraps at words, nothing lost.
    expect(out).toContain('│ gpu-0004/5 rank 37 │');
    const words = out
      .split('\n')
      .map((l) => l.split('│')[4]?.trim() ?? '')
      .join(' ');
    expect(words.replace(/\s+/g, ' ')).toContain(summary);
  });

  it('is as wide as its cells when it fits, or with no terminal (piped)', () => {
    const piped = table(head, rows, null);
    expect(width(piped)).toBeGreaterThan(150);
    expect(piped.split('\n')).toHaveLength(7); // one line a row
    expect(table(head, rows, 400)).toBe(piped);
  });

  it('narrows every wide column to one cap on a very narrow terminal', () => {
    const out = table(head, rows, 60);
    expect(width(out)).toBeLessThanOrEqual(60);
    expect(out).toContain('│ straggler │');
  });
});
