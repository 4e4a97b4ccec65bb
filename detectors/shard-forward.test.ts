import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MegatronParser } from '../collectors/parsers/megatron.js';
import type { RankwatchEvent, StepEvent } from '../schema/events.js';
import { FAMILY_FAULTS } from '../sim/fault-families.js';
import { HeldEvents } from './held-events.js';
import { JobStageRunner } from './job-stage.js';
import {
  passOn,
  type ShardEvents,
  type ShardSteps,
  STEPS_PER_RECORD,
  stepAt,
  stepRowOk,
  stepRows,
} from './shard-forward.js';
import { simulated } from './sharded.suite.js';
import { SHARD_FORMAT } from './slowlink/shard-reduce.js';

/** A record's rows as the step events they were, as the job stage hands them over; how many were malformed. */
function stepsOf(r: ShardSteps, each: (e: StepEvent) => void): number {
  let bad = 0;
  for (let i = 0; i < stepRows(r); i++) {
    if (stepRowOk(r, i)) each(stepAt(r, i));
    else bad++;
  }
  return bad;
}

/** Each record's events back, as the job stage reads them (through JSON, as the bus carries them). */
function back(records: unknown[]): RankwatchEvent[] {
  const out: RankwatchEvent[] = [];
  for (const r of JSON.parse(JSON.stringify(records)) as (ShardSteps | ShardEvents)[]) {
    if (r.t === 'steps') expect(stepsOf(r, (e) => out.push(e))).toBe(0);
    else out.push(...r.events);
  }
  return out;
}

/** A real Megatron-LM log's step events (with the parser's own `timing` field) and checkpoints. */
function megatron(): RankwatchEvent[] {
  const lines = readFileSync(
    join(import.meta.dirname, '..', 'collectors', 'parsers', 'fixtures', 'megatron.log'),
    'utf8',
  ).split('\n');
  const p = new MegatronParser({ job: 'llama-13b', rank: 63, host: 'gpu-0008', gpu: 7, seqLen: 4096 });
  const out = lines.filter(Boolean).map((l, i) => p.push(l, 1_764_480_000_000 + i));
  return [...out.flatMap((o) => o.events), ...p.flushPending()] as RankwatchEvent[];
}

describe('a job’s events passed on by its shards', () => {
  it('come back as the events they were, in order: simulated steps, faults and restarts, and a real log’s', () => {
    const sim = simulated(FAMILY_FAULTS.hang).filter((e) => e.kind !== 'gpu' && e.kind !== 'collective');
    const field = megatron();
    expect(field.some((e) => e.kind === 'step' && (e as { timing?: string }).timing === 'wall_only')).toBe(
      true,
    );
    for (const input of [sim, field]) {
      const records: unknown[] = [];
      for (const e of input) passOn(e, (e as { job: string }).job, 0, 1000, records);
      expect(back(records)).toEqual(input);
      // Steps in columns: far fewer records than events (the simulated job's), none over the row limit.
      if (input === sim) expect(records.length).toBeLessThan(input.length / 100);
      for (const r of records as ShardSteps[])
        if (r.t === 'steps') expect(r.ts.length).toBeLessThanOrEqual(STEPS_PER_RECORD);
    }
  });

  it('a row or event that is not a valid event is dropped and counted; the rest of its record goes on', () => {
    const steps = simulated(FAMILY_FAULTS.slow_rank).filter((e): e is StepEvent => e.kind === 'step');
    const records: unknown[] = [];
    for (const e of steps.slice(0, 3)) passOn(e, e.job, 0, null, records);
    const r = records[0] as ShardSteps;
    r.host[1] = 7; // names no host of the record
    const got: StepEvent[] = [];
    expect(stepsOf(r, (e) => got.push(e))).toBe(1);
    expect(got).toEqual([steps[0], steps[2]]);

    const stage = new JobStageRunner();
    stage.shardRecord({
      t: 'events',
      format: SHARD_FORMAT,
      job: 'j',
      group: 0,
      job_ts: null,
      events: [{ kind: 'fault' }],
    });
    stage.shardRecord(r);
    expect(stage.stats().shard_steps_malformed).toBe(2);
  });

  it('wait at the job stage for the job event their shard had read: no "MFU unavailable" before it', () => {
    const input = simulated(FAMILY_FAULTS.slow_rank);
    const job = input.find((e) => e.kind === 'job')!;
    const records: unknown[] = [];
    for (const e of input) if (e.kind === 'step') passOn(e, e.job, 0, job.ts, records);
    const stage = new JobStageRunner();
    for (const r of records) stage.shardRecord(r);
    expect(stage.take().mfu).toEqual([]);
    stage.push({ ...job, host_groups: 1 } as RankwatchEvent);
    stage.shardRecord({ t: 'mark', format: SHARD_FORMAT, job: job.job, group: 0, through: 1e9, ts: 0 });
    stage.endOfInput();
    const out = stage.take();
    expect(out.findings.filter((f) => f.type === 'mfu_unavailable')).toEqual([]);
    expect(out.mfu.length).toBeGreaterThan(0);
  });
});

describe('held events', () => {
  const ev = (ts: number, n: number) =>
    ({ v: 1, kind: 'job_event', ts, job: 'j', event: `e${n}` }) as RankwatchEvent;

  it('come back in event-time order, ties in the order they came, each with whether it was read live; the lowest offset per partition and the longest wait are kept', () => {
    const h = new HeldEvents();
    const ts = [50, 10, 30, 10, 70, 20, 30];
    ts.forEach((t, i) => {
      h.push(ev(t, i), 1000 + i, i % 2 ? 'records/0' : 'events/0', 100 + i, i % 3 !== 0);
    });
    const low = new Map<string, number>();
    h.lowestOffsets(low);
    expect(low).toEqual(
      new Map([
        ['events/0', 100],
        ['records/0', 101],
      ]),
    );
    expect(h.oldestArrival()).toBe(1000);
    const order: string[] = [];
    while (h.size) {
      const top = h.topTs();
      const e = h.pop() as { event: string };
      order.push(`${top}:${e.event}${h.poppedLive ? '' : ' replayed'}`);
    }
    // Pushed replayed: e0, e3 and e6 (every third).
    expect(order).toEqual([
      '10:e1',
      '10:e3 replayed',
      '20:e5',
      '30:e2',
      '30:e6 replayed',
      '50:e0 replayed',
      '70:e4',
    ]);
    expect(h.oldestArrival()).toBeUndefined();
    const none = new Map<string, number>();
    h.lowestOffsets(none);
    expect(none.size).toBe(0);
  });

  it('hold a step record’s rows with events, in one event-time order, and make each row the event it was only when taken out', () => {
    const steps = (from: number, ts: number[]): ShardSteps => {
      const out: unknown[] = [];
      for (const [i, t] of ts.entries())
        passOn(
          {
            v: 1,
            kind: 'step',
            ts: t,
            job: 'j',
            rank: from + i,
            host: 'h',
            gpu: i,
            step: 7,
            step_ms: 1,
            compute_ms: 1,
          },
          'j',
          0,
          null,
          out,
        );
      return JSON.parse(JSON.stringify(out[0])) as ShardSteps;
    };
    const h = new HeldEvents();
    const a = steps(0, [40, 10, 30]);
    const b = steps(10, [20, 10]);
    for (let i = 0; i < a.ts.length; i++) h.pushRow(a, i, 1, 'records/0', i, true);
    h.push(ev(10, 9), 1, 'events/0', 0, true);
    expect([h.topTs(), h.topKind(), h.topStep()]).toEqual([10, 'step', 7]);
    const got: string[] = [];
    const take = () => {
      const e = h.pop() as StepEvent & { event?: string };
      got.push(`${e.ts}:${e.kind === 'step' ? `rank ${e.rank}` : e.event}`);
      return e;
    };
    expect(take()).toEqual({
      v: 1,
      kind: 'step',
      ts: 10,
      job: 'j',
      rank: 1,
      host: 'h',
      gpu: 1,
      step: 7,
      step_ms: 1,
      compute_ms: 1,
    });
    expect([h.topKind(), Number.isNaN(h.topStep())]).toEqual(['job_event', true]);
    take();
    // Slots taken out are used again: order still by time, then by when each came.
    for (let i = 0; i < b.ts.length; i++) h.pushRow(b, i, 2, 'records/1', i, true);
    h.push(ev(30, 8), 2, 'events/0', 1, true);
    while (h.size) take();
    expect(got).toEqual([
      '10:rank 1',
      '10:e9',
      '10:rank 11',
      '20:rank 10',
      '30:rank 2',
      '30:e8',
      '40:rank 0',
    ]);
  });

  it('keep a partition’s offset and its wait while any row of a record read there is held, however many were taken out', () => {
    const h = new HeldEvents();
    const r = {
      ts: [3, 1, 2],
      rank: [0, 1, 2],
      hosts: ['h'],
      host: [0, 0, 0],
      gpu: [0, 1, 2],
      step: [4, 4, 4],
      step_ms: [1, 1, 1],
      compute_ms: [1, 1, 1],
    } as unknown as ShardSteps;
    for (let i = 0; i < 3; i++) h.pushRow(r, i, 500, 'records/2', 40, true);
    h.push(ev(5, 1), 600, 'records/2', 41, false);
    const lowest = () => {
      const m = new Map<string, number>();
      h.lowestOffsets(m);
      return m.get('records/2');
    };
    h.pop();
    h.pop();
    expect([lowest(), h.oldestArrival()]).toEqual([40, 500]);
    expect((h.pop() as StepEvent).rank).toBe(0);
    expect([lowest(), h.oldestArrival(), h.poppedLive]).toEqual([41, 600, true]);
    h.pop();
    expect([lowest(), h.oldestArrival(), h.poppedLive]).toEqual([undefined, undefined, false]);
  });
});
