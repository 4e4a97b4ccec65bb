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

/** The incidents' openings (an incident whose opening was dropped still shows by its updates). */
const opened = (fs: Finding[]) => incidents(fs.filter((f) => f.state === 'open'));

type Order = 'records first' | 'events first';

/**
 * The old owner reads half the records (the shards' reductions, and the job's steps and other
 * events they pass on) but not yet the job's own topic, whose `job` event they wait for, then
 * dies. What it committed: the records up to the lowest offset it holds, or (as before the fix)
 * all it read. The new owner replays what was committed, then reads the rest live.
 */
function handover(events: RankwatchEvent[], order: Order, commitHeld: boolean): Finding[] {
  const { found, records, jobEvents } = topics(events);
  const out: Finding[] = [...found];
  const old = new JobStageRunner();
  const killedAt = Math.floor(records.length / 2);
  for (let j = 0; j < killedAt; j++) {
    old.position('records', 0, j, false);
    old.shardRecord(records[j]);
    out.push(...old.take().findings);
  }
  const held = old.heldFrom().get('records/0');
  expect(held).toBeDefined();
  const committed = 0;
  const recordsCommitted = commitHeld ? held! : killedAt;

  const next = new JobStageRunner();
  const replay = {
    events: () =>
      jobEvents.slice(0, committed).forEach((e, i) => {
        next.position('events', 0, i, true);
        next.push(e);
        next.dropReplayed();
      }),
    records: () =>
      records.slice(0, recordsCommitted).forEach((r, j) => {
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
      records.slice(recordsCommitted).forEach((r, k) => {
        next.position('records', 0, recordsCommitted + k, false);
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
        const got = handover(events, order, true);
        expect(incidents(got)).toEqual(want);
        expect(opened(got)).toEqual(opened(unsharded(events)));
      });

  it('committing the events it holds (as before) loses their findings', () => {
    const events = input('nic');
    const want = incidents(unsharded(events));
    // Their openings: an incident opened in the dropped output still shows by its later updates.
    const got = opened(handover(events, 'events first', false));
    expect(opened(unsharded(events)).filter((k) => !got.includes(k)).length).toBeGreaterThan(0);
    expect(want.length).toBeGreaterThan(0);
  });

  it('live steps that a replayed job event releases come out; the replayed event owns nothing', () => {
    // The two consumers go at their own pace: the records topic may be live (the steps the old
    // owner held) while the job's own topic, whose `job` event releases them, is still replayed.
    const events = input('slow_rank');
    const { records, jobEvents } = topics(events);
    const r = new JobStageRunner();
    records.forEach((x, j) => {
      r.position('records', 0, j, false);
      r.shardRecord(x);
    });
    expect(r.heldFrom().get('records/0')).toBeDefined();
    expect(r.take().findings).toEqual([]);
    jobEvents.forEach((e, i) => {
      r.position('events', 0, i, true);
      r.push(e);
      r.dropReplayed();
    });
    // Released by the replayed job event, the live steps' findings come out now, not dropped with
    // the replay's output (the job's `finished` may still wait for the other groups' signs).
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
