/**
 * How far a job stage's partitions may be committed (pipeline/commit-limits.ts): below the lowest
 * held offset, and only once the take that noted it, and every take before it, is written.
 */
import { describe, expect, it } from 'vitest';
import { CommitLimits } from './commit-limits.js';

const none = new Map<string, number>();

describe('commit limits', () => {
  it('stop at the lowest held event, or past the last read when none is held', () => {
    const c = new CommitLimits();
    expect(c.limit('events', 0)).toBeUndefined();
    for (let o = 0; o < 10; o++) c.reading('events', 0, o);
    c.reading('events', 1, 4);
    c.written(c.taken(new Map([['events/0', 3]])));
    expect(c.limit('events', 0)).toBe(3);
    expect(c.limit('events', 1)).toBe(5);
    // The held ones came out (released by a record) and that take is written: up to the end.
    c.reading('records', 0, 0);
    c.written(c.taken(none));
    expect(c.limit('events', 0)).toBe(10);
  });

  it('count a take only once every take before it is written (writes finish out of order)', () => {
    const c = new CommitLimits();
    c.reading('events', 0, 4);
    const slow = c.taken(new Map([['events/0', 2]]));
    c.reading('events', 0, 9);
    const fast = c.taken(none);
    c.written(fast);
    // The earlier take's output (what released events 2-4, maybe) is not stored yet.
    expect(c.limit('events', 0)).toBeUndefined();
    c.written(slow);
    expect(c.limit('events', 0)).toBe(10);
  });

  it('forget partitions that moved away, so a stale limit never lets a commit pass held events', () => {
    const c = new CommitLimits();
    c.reading('events', 1, 99);
    c.reading('events', 2, 7);
    c.written(c.taken(none));
    const pending = c.taken(none);
    c.forget([1]);
    expect(c.limit('events', 1)).toBeUndefined();
    expect(c.limit('events', 2)).toBe(8);
    // Back again: only what is read from now on counts, not a take noted before it moved.
    c.written(pending);
    expect(c.limit('events', 1)).toBeUndefined();
    c.reading('events', 1, 3);
    c.written(c.taken(new Map([['events/1', 3]])));
    expect(c.limit('events', 1)).toBe(3);
  });
});
