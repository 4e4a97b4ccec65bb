/**
 * How far a job stage's partitions may be committed (pipeline/commit-limits.ts): below the lowest
 * held offset, and only once the take that noted it, and every take before it, is written.
 */
import { describe, expect, it } from 'vitest';
import { shardOut, simulated } from '../detectors/sharded.suite.js';
import { FAMILY_FAULTS } from '../sim/fault-families.js';
import { MemoryTransport } from '../stream/memory.js';
import type { Delivery } from '../stream/transport.js';
import { buildPipeline } from './build.js';
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

  it('reach past the furthest offset read, whatever order the deliveries were handled in', () => {
    const c = new CommitLimits();
    // Three messages handled 1, 2, 0 (none held): all three are out.
    for (const o of [1, 2, 0]) c.reading('events', 0, o);
    c.written(c.taken(none));
    expect(c.limit('events', 0)).toBe(3);
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

describe("a job stage's pipeline", () => {
  it('limits the events topic to the first message it holds, until the records that release it are written', async () => {
    const { records, jobEvents } = shardOut(simulated(FAMILY_FAULTS.nic), 2);
    const p = buildPipeline({ transport: new MemoryTransport(), stage: 'job', shardRecordsTopic: 'records' });
    const message = (topic: string, offset: number, events: unknown[]): Delivery => ({
      key: 'j',
      partition: 0,
      offset,
      events,
      topic,
      messages: [{ offset, events: events.length, undecodable: 0 }],
    });
    let offset = 0;
    for (let i = 0; i < jobEvents.length; i += 1000)
      await p.handle(message('events', offset++, jobEvents.slice(i, i + 1000)));
    // Its steps wait for the shards: nothing of the first message may be committed.
    expect(p.commitLimit('events', 0)).toBe(0);
    const out = await p.handle(message('records', 0, records));
    expect(out.findings.some((f) => f.type === 'slow_link')).toBe(true);
    expect(p.commitLimit('events', 0)).toBe(offset);
  });
});

describe("a job stage's delivery of several records messages", () => {
  it('holds the records topic back at the message whose steps it holds, not at the delivery’s last', async () => {
    const { records } = shardOut(simulated(FAMILY_FAULTS.nic), 2);
    const p = buildPipeline({ transport: new MemoryTransport(), stage: 'job', shardRecordsTopic: 'records' });
    // The shards' steps wait for their job's `job` event (on the events topic, not read yet): the
    // first of three messages, merged into one delivery as a busy consumer does, holds steps.
    const third = Math.ceil(records.length / 3);
    const parts = [records.slice(0, third), records.slice(third, 2 * third), records.slice(2 * third)];
    expect(parts[0].some((r) => (r as { t?: string }).t === 'steps')).toBe(true);
    await p.handle({
      key: 'j',
      partition: 0,
      offset: 7,
      events: records,
      topic: 'records',
      messages: parts.map((m, i) => ({ offset: 5 + i, events: m.length, undecodable: 0 })),
    });
    // Committing to 7 would mark messages 5 and 6 done while their steps are held: a new owner of
    // the job would not read them live.
    expect(p.commitLimit('records', 0)).toBe(5);
  });
});
