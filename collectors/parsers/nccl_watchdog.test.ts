import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { WatchdogReader } from './nccl_watchdog.js';

const NOW = 1_764_480_000_000;

/** Reads a fixture line by line as the source does, then flushes what still waits. */
function readWatchdog(name: string, host = 'node-a', job = 'llm') {
  const text = readFileSync(join(import.meta.dirname, 'fixtures', name), 'utf8');
  const reader = new WatchdogReader({ host, job });
  const events = [];
  const problems = [];
  for (const line of text.split('\n')) {
    const r = reader.push(line, NOW);
    events.push(...r.events);
    problems.push(...r.problems);
  }
  const end = reader.flush(NOW);
  events.push(...end.events);
  problems.push(...end.problems);
  return { events, problems };
}

const pick = (e: Record<string, unknown>) => [
  e.rank,
  e.group_rank,
  e.pg,
  e.pg_name,
  e.seq,
  e.op,
  e.last_completed,
];

describe('NCCL watchdog lines → nccl_timeout faults', () => {
  it('global rank from [rankN]:, group from the `[PG ID 0 PG GUID 0(default_pg) Rank N]` line (BasicSR#737)', () => {
    const { events, problems } = readWatchdog('nccl-watchdog-pg-guid.log');
    expect(problems).toEqual([]);
    expect(events.map(pick)).toEqual([
      [1, 1, '0', 'default_pg', 808, 'ALLREDUCE', 807],
      [0, 0, '0', 'default_pg', 808, 'ALLREDUCE', 807],
      // Its exception line is cut: the timeout still counts, its group unknown.
      [2, 2, undefined, undefined, 808, 'ALLREDUCE', undefined],
    ]);
    for (const e of events) {
      expect(validateEvent(e).ok).toBe(true);
      expect(e).toMatchObject({
        kind: 'fault',
        source: 'nccl_timeout',
        host: 'node-a',
        job: 'llm',
        timeout_ms: 600000,
      });
    }
    expect(events[0].ran_ms).toBe(600020);
  });

  it('keeps the group rank apart from the global rank: `[PG 1 Rank N]`, launcher counters, a cut line (LlamaFactory#7396)', () => {
    const { events, problems } = readWatchdog('nccl-watchdog-pg-rank.log');
    expect(events.map(pick)).toEqual([
      [0, 0, '1', undefined, 1580, 'ALLREDUCE', 1579],
      [4, 4, undefined, undefined, 1580, 'ALLREDUCE', undefined],
    ]);
    expect(problems.map((p) => p.reason)).toEqual(['watchdog timeout line in an unknown or cut-off form']);
  });

  it('joins lines wrapped after "timeout:" and "detected", under a host prefix (milabench#269)', () => {
    const { events, problems } = readWatchdog('nccl-watchdog-wrapped.log');
    expect(problems).toEqual([]);
    expect(events.map(pick)).toEqual([
      [12, 12, '0', 'default_pg', 2070, 'REDUCE', 2069],
      [14, 14, undefined, undefined, 2070, 'REDUCE', undefined],
      [11, 11, undefined, undefined, 2070, 'REDUCE', undefined],
    ]);
  });

  it('reads the older form without prefix, counts a repeated timeout once, takes the group from what(): (pytorch#118369, sglang#1693)', () => {
    const { events, problems } = readWatchdog('nccl-watchdog-legacy.log');
    expect(problems).toEqual([]);
    expect(events.map(pick)).toEqual([
      [undefined, 0, undefined, undefined, 96120, 'ALLREDUCE', undefined],
      [undefined, 0, undefined, undefined, 96117, 'ALLREDUCE', undefined],
      [undefined, 0, undefined, undefined, 96125, 'ALLREDUCE', undefined],
      [undefined, 7, undefined, undefined, 64088, 'ALLREDUCE', undefined],
      [undefined, 5, '3', undefined, 9141, '_ALLGATHER_BASE', undefined],
    ]);
    expect(events[0].ran_ms).toBe(25624887);
    expect(events[0].rank).toBeUndefined();
    for (const e of events) expect(validateEvent(e).ok).toBe(true);
  });

  it('counts a timeout repeated in what(): once; a line behind a progress bar (picotron#6, LlamaFactory#8261)', () => {
    const { events, problems } = readWatchdog('nccl-watchdog-what.log');
    expect(events.map(pick)).toEqual([
      [undefined, 2, undefined, undefined, 1, 'ALLREDUCE', undefined],
      [undefined, 3, undefined, undefined, 1, 'ALLREDUCE', undefined],
    ]);
    expect(problems.map((p) => [p.line, p.reason])).toEqual([
      [10, 'watchdog timeout line in an unknown or cut-off form'],
    ]);
  });

  it('takes the group from a what(): repeat that names it (instructlab/training#520)', () => {
    const reader = new WatchdogReader({ host: 'h' });
    const first = reader.push(
      '[E ProcessGroupNCCL.cpp:915] [Rank 3] NCCL watchdog thread terminated with exception: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1) ran for 90 milliseconds before timing out.',
      NOW,
    );
    const again = reader.push(
      '  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1) ran for 90 milliseconds before timing out.',
      NOW,
    );
    expect([...first.events, ...again.events]).toEqual([]);
    // In the default group the group rank is the global rank.
    expect(reader.flush(NOW).events.map(pick)).toEqual([
      [3, 3, '0', 'default_pg', 1, 'ALLREDUCE', undefined],
    ]);
  });

  it('in the default group (id 0) without a prefix, the group rank is the global rank', () => {
    const reader = new WatchdogReader({ host: 'h' });
    reader.push(
      '[E1130 05:12:04.0 ProcessGroupNCCL.cpp:616] [Rank 6] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.',
      NOW,
    );
    const r = reader.push(
      '[E1130 05:12:04.1 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 6] Exception (either an error or timeout) detected by watchdog at work: 9, last enqueued NCCL work: 9, last completed NCCL work: 8.',
      NOW,
    );
    expect(r.events.map(pick)).toEqual([[6, 6, '0', 'default_pg', 9, 'BROADCAST', 8]]);
  });
});
