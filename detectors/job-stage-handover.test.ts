/**
 * A job stage killed or moved mid-stream, in one process (docs/kafka.md, "A job stage killed or
 * moved"): the old owner holds a sharded job's events until its shards' records come, and commits
 * the events no further than the lowest one it holds (`heldFrom`); the new owner replays what was
 * committed with its output dropped (`dropReplayed`), in whatever order its two consumers deliver
 * the topics, then goes on live. What both owners put out equals one runner over the same events.
 * The same with processes on the real broker: tests/kafka-sharded-jobstage-kill.int.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { FAMILY_FAULTS } from '../sim/fault-families.js';
import { JobStageRunner } from './job-stage.js';
import { shardOut, simulated, unsharded } from './sharded.suite.js';

const input = (family: keyof typeof FAMILY_FAULTS) => simulated(FAMILY_FAULTS[family]);

const incidents = (fs: Finding[]) =>
  [...new Set(fs.map((f) => `${f.id} ${f.type} ${f.host} ${f.gpu ?? '-'} ${f.onset_ts ?? '-'}`))].sort();

/** Two shards' records (GPU findings as records too), and the job's own events, as the two topics carry them. */
const topics = (events: RankwatchEvent[]) => shardOut(events, 2);

type Order = 'records first' | 'events first';

/**
 * The old owner reads every job event (held: no records yet) and a quarter of the records, then
 * dies. What it committed: every record it read; the events up to the lowest it holds, or (as
 * before the fix) all it read. The new owner replays both, then reads the rest live.
 */
function handover(events: RankwatchEvent[], order: Order, commitHeld: boolean): Finding[] {
  const { found, records, jobEvents } = topics(events);
  const out: Finding[] = [...found];
  const old = new JobStageRunner();
  jobEvents.forEach((e, i) => {
    old.position('events', 0, i, false);
    old.push(e);
    out.push(...old.take().findings);
  });
  const killedAt = Math.floor(records.length / 4);
  for (let j = 0; j < killedAt; j++) {
    old.position('records', 0, j, false);
    old.shardRecord(records[j]);
    out.push(...old.take().findings);
  }
  const held = old.heldFrom().get('events/0');
  expect(held).toBeDefined();
  const committed = commitHeld ? held! : jobEvents.length;

  const next = new JobStageRunner();
  const replay = {
    events: () =>
      jobEvents.slice(0, committed).forEach((e, i) => {
        next.position('events', 0, i, true);
        next.push(e);
        next.dropReplayed();
      }),
    records: () =>
      records.slice(0, killedAt).forEach((r, j) => {
        next.position('records', 0, j, true);
        next.shardRecord(r);
        next.dropReplayed();
      }),
  };
  const live = {
    events: () =>
      jobEvents.slice(committed).forEach((e, k) => {
        next.position('events', 0, committed + k, false);
        next.push(e);
        out.push(...next.take().findings);
      }),
    records: () =>
      records.slice(killedAt).forEach((r, k) => {
        next.position('records', 0, killedAt + k, false);
        next.shardRecord(r);
        out.push(...next.take().findings);
      }),
  };
  // The two consumers go at their own pace: one topic may be live while the other still replays.
  if (order === 'records first') {
    replay.records();
    live.records();
    replay.events();
    live.events();
  } else {
    replay.events();
    live.events();
    replay.records();
    live.records();
  }
  next.endOfInput();
  out.push(...next.take().findings);
  return out;
}

describe('a job stage that dies holding events', () => {
  for (const family of ['nic', 'slow_rank'] as const)
    for (const order of ['records first', 'events first'] as const)
      it(`${family}, ${order}: the next owner puts out what the held events produce, as replay finds`, () => {
        const events = input(family);
        const want = incidents(unsharded(events));
        expect(want.length).toBeGreaterThan(0);
        expect(incidents(handover(events, order, true))).toEqual(want);
      });

  it('committing the events it holds (as before) loses their findings', () => {
    const events = input('nic');
    const want = incidents(unsharded(events));
    const got = incidents(handover(events, 'records first', false));
    expect(want.filter((k) => !got.includes(k)).length).toBeGreaterThan(0);
  });

  it('live events that replayed records release come out; the replayed records own nothing', () => {
    // The two consumers go at their own pace: the events topic may be live (the events the old
    // owner held) while the records that release them are still being replayed.
    const events = input('slow_rank');
    const { records, jobEvents } = topics(events);
    const r = new JobStageRunner();
    jobEvents.forEach((e, i) => {
      r.position('events', 0, i, false);
      r.push(e);
    });
    expect(r.heldFrom().get('events/0')).toBeDefined();
    expect(r.take().findings).toEqual([]);
    records.forEach((x, j) => {
      r.position('records', 0, j, true);
      r.shardRecord(x);
      r.dropReplayed();
    });
    expect(r.heldFrom().size).toBe(0);
    r.endOfInput();
    const out = r.take();
    const want = incidents(unsharded(events).filter((f) => f.type === 'straggler'));
    expect(want.length).toBeGreaterThan(0);
    expect(incidents(out.findings.filter((f) => f.type === 'straggler'))).toEqual(want);
    expect(out.mfu.length).toBeGreaterThan(0);
  });

  it('holds nothing and limits nothing once every group reported', () => {
    const { records, jobEvents } = topics(input('nic'));
    const r = new JobStageRunner();
    records.forEach((x, j) => {
      r.position('records', 0, j, false);
      r.shardRecord(x);
    });
    jobEvents.forEach((e, i) => {
      r.position('events', 0, i, false);
      r.push(e);
    });
    r.flush();
    expect(r.heldFrom().size).toBe(0);
  });
});
