import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { findLaggards, parseWatchdogLine, type WatchdogTimeout } from './nccl_watchdog.js';

const lines = readFileSync(join(import.meta.dirname, 'fixtures', 'nccl-watchdog.log'), 'utf8')
  .split('\n')
  .filter(Boolean);
const NOW = 1_764_480_000_000;

describe('NCCL watchdog lines → nccl_timeout faults', () => {
  const out = lines.map((l, i) => parseWatchdogLine(l, i + 1, NOW, { host: 'gpu-0003', job: 'llama-13b' }));
  const parsed = out.flatMap((o) => ('event' in o ? [o] : []));

  it('parses the rank from [rankN] or [Rank N] / [PG … Rank N], with SeqNum, OpType and timeouts', () => {
    expect(parsed.map((p) => [p.timeout.rank, p.timeout.pg, p.timeout.seq, p.timeout.op])).toEqual([
      [0, '0', 4812, 'ALLREDUCE'],
      [1, '0', 4812, 'ALLREDUCE'],
      [3, '0', 4811, '_ALLGATHER_BASE'],
      [2, '0', 4812, 'ALLREDUCE'],
      [4, '2', 77, 'SEND'],
      [5, '2', 77, 'RECV'],
    ]);
    for (const p of parsed) {
      expect(validateEvent(p.event).ok).toBe(true);
      expect(p.event).toMatchObject({
        kind: 'fault',
        source: 'nccl_timeout',
        host: 'gpu-0003',
        job: 'llama-13b',
      });
    }
    expect(parsed[3].event).toMatchObject({ timeout_ms: 1800000, ran_ms: 1800594 });
  });

  it('ignores other watchdog chatter and reports truncated or incomplete lines', () => {
    expect(out.filter((o) => 'ignored' in o)).toHaveLength(1);
    expect(out.flatMap((o) => ('problem' in o ? [o.problem.line] : []))).toEqual([8, 9]);
  });

  it('names the rank whose last SeqNum lags its peers, per process group', () => {
    expect(findLaggards(parsed.map((p) => p.timeout))).toEqual([
      { pg: '0', rank: 3, seq: 4811, peersSeq: 4812 },
    ]);
  });

  it('names no one when all ranks agree, or only one rank reported', () => {
    const t = (rank: number, seq: number): WatchdogTimeout => ({
      rank,
      pg: '0',
      seq,
      op: 'ALLREDUCE',
      ranMs: 1,
    });
    expect(findLaggards([t(0, 5), t(1, 5)])).toEqual([]);
    expect(findLaggards([t(0, 5)])).toEqual([]);
    expect(findLaggards([t(0, 5), t(1, 9), t(0, 9), t(2, 9)])).toEqual([]);
  });
});
