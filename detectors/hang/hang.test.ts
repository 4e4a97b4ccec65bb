import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { WatchdogReader } from '../../collectors/parsers/nccl_watchdog.js';
import type { RankwatchEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { DetectorRunner } from '../runner.js';

const fixtures = join(import.meta.dirname, '../../collectors/parsers/fixtures');
const T0 = 1_764_480_000_000;

/**
 * A public watchdog log read as the nccl_watchdog sources of several nodes would: each line goes
 * to the reader of the host that `hostOf(global rank)` names; the readers' events in line order.
 */
function collect(name: string, hostOf: (rank: number) => string, job = 'llm'): RankwatchEvent[] {
  const readers = new Map<string, WatchdogReader>();
  const events: RankwatchEvent[] = [];
  let ts = T0;
  for (const line of readFileSync(join(fixtures, name), 'utf8').split('\n')) {
    const rank = Number(/\[rank(\d+)\]:/.exec(line)?.[1] ?? 0);
    const host = hostOf(rank);
    const reader = readers.get(host) ?? new WatchdogReader({ host, job });
    readers.set(host, reader);
    events.push(...(reader.push(line, ++ts).events as RankwatchEvent[]));
  }
  for (const r of readers.values()) events.push(...(r.flush(++ts).events as RankwatchEvent[]));
  return events;
}

function judge(events: RankwatchEvent[]): Finding[] {
  const runner = new DetectorRunner();
  for (const e of events) runner.push(e);
  return runner.take().findings;
}

const twoHosts = (rank: number) => (rank < 2 ? 'node-a' : 'node-b');

describe('NCCL watchdog timeouts judged', () => {
  it('a hang is one critical finding per job, naming the first rank to time out and its host (BasicSR#737)', () => {
    const f = judge(collect('nccl-watchdog-pg-guid.log', twoHosts));
    expect(f.map((x) => [x.type, x.state, x.host, x.rank, x.severity])).toEqual([
      ['nccl_hang', 'open', 'node-a', 1, 'critical'],
    ]);
    expect(f[0].job).toBe('llm');
    expect(f[0].evidence).toMatchObject({ first: { op: 'ALLREDUCE', seq: 808, group_rank: 1 } });
    // Every rank agreed on the operation and none lags: no desync, no one named behind.
  });

  it('ranks at one SeqNum in different operations are a desync naming the odd rank; the rank behind is named', () => {
    const f = judge(collect('nccl-watchdog-desync-derived.log', twoHosts));
    const opened = f.filter((x) => x.state === 'open');
    expect(opened.map((x) => [x.type, x.host, x.rank])).toEqual([
      ['nccl_hang', 'node-a', 0],
      ['nccl_desync', 'node-b', 2],
      ['nccl_rank_behind', 'node-b', 3],
    ]);
    const desync = opened[1];
    expect(desync.evidence).toMatchObject({ pg: '0', pg_name: 'default_pg', pg_known: true, seq: 808 });
    expect(Object.keys(desync.evidence.ops as object).sort()).toEqual(['ALLREDUCE', '_ALLGATHER_BASE']);
    expect(desync.summary).toContain('rank 2 in _ALLGATHER_BASE');
    expect(opened[2].evidence).toMatchObject({
      pg: '0',
      group_rank: 3,
      last_completed: 806,
      peers_last_completed: 807,
    });
  });

  it('names no rank behind when the group is not known, even when SeqNums differ (pytorch#118369)', () => {
    const f = judge(collect('nccl-watchdog-legacy.log', () => 'node-c'));
    expect(f.map((x) => x.type)).toEqual(['nccl_hang']);
    expect(f[0].host).toBe('node-c');
    expect(f[0].rank).toBeUndefined(); // [Rank 0] is the group rank; the global rank was not printed
    expect(f[0].evidence).toMatchObject({ first: { group_rank: 0, seq: 96120 } });
  });

  it('without the group, one rank in two operations at a SeqNum is two groups, not a desync', () => {
    const fault = (op: string, ts: number) =>
      ({
        v: 1,
        kind: 'fault',
        ts,
        host: 'h',
        job: 'j',
        source: 'nccl_timeout',
        message: '',
        seq: 77,
        op,
        group_rank: 0,
      }) as RankwatchEvent;
    expect(judge([fault('SEND', T0), fault('ALLREDUCE', T0 + 1)]).map((x) => x.type)).toEqual(['nccl_hang']);
  });

  it('a restart of the job resolves its hang findings', () => {
    const events = collect('nccl-watchdog-desync-derived.log', twoHosts);
    const f = judge([...events, { v: 1, kind: 'job_event', ts: T0 + 10_000, job: 'llm', event: 'restart' }]);
    const resolved = f.filter((x) => x.state === 'resolved');
    expect(resolved.map((x) => x.type).sort()).toEqual(['nccl_desync', 'nccl_hang', 'nccl_rank_behind']);
  });
});
