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
  runner.flush();
  return runner.take().findings;
}

const twoHosts = (rank: number) => (rank < 2 ? 'node-a' : 'node-b');

describe('NCCL watchdog timeouts judged', () => {
  it('a hang with no culprit in sight is one critical finding per job, on the first rank to time out, said as such (BasicSR#737)', () => {
    const f = judge(collect('nccl-watchdog-pg-guid.log', twoHosts));
    expect(f.map((x) => [x.type, x.state, x.host, x.rank, x.severity, x.action])).toEqual([
      ['nccl_hang', 'open', 'node-a', 1, 'critical', 'none'],
    ]);
    expect(f[0].job).toBe('llm');
    expect(f[0].evidence).toMatchObject({
      culprit: 'unknown',
      timeouts: { timed_out: 3, hosts: 2, first: { op: 'ALLREDUCE', seq: 808, group_rank: 1 } },
    });
    expect(f[0].summary).toContain('No rank could be singled out');
    // Every rank agreed on the operation and none lags: no desync, no one named behind.
  });

  it('the rank absent from the timeouts of a job whose ranks are known is the culprit (BasicSR#737)', () => {
    // Ranks 0-3 stepped; the log has timeouts of ranks 0, 1 and 2 only: rank 3 never timed out.
    const steps = [0, 1, 2, 3].map(
      (rank) =>
        ({
          v: 1,
          kind: 'step',
          ts: T0 - 600_000,
          job: 'llm',
          rank,
          host: twoHosts(rank),
          gpu: rank % 2,
          step: 41,
          step_ms: 1000,
          compute_ms: 900,
        }) as RankwatchEvent,
    );
    const f = judge([...steps, ...collect('nccl-watchdog-pg-guid.log', twoHosts)]).filter((x) =>
      x.type.startsWith('nccl_'),
    );
    expect(f.map((x) => [x.type, x.host, x.gpu, x.rank, x.action])).toEqual([
      ['nccl_hang', 'node-b', 1, 3, 'watch'],
    ]);
    expect(f[0].evidence).toMatchObject({
      signals: ['missing_from_timeouts'],
      timeouts: { timed_out: 3, culprit_timed_out: false, missing: [3] },
    });
    expect(f[0].summary).toMatch(
      /rank 3 \(node-b GPU 1\).*ALLREDUCE of process group 0 \(default_pg\) \(SeqNum 808\)/,
    );
  });

  it('ranks at one SeqNum in different operations are a desync naming the odd rank; the hang names the rank behind', () => {
    const f = judge(collect('nccl-watchdog-desync-derived.log', twoHosts));
    const opened = f.filter((x) => x.state === 'open');
    expect(opened.map((x) => [x.type, x.host, x.rank, x.action])).toEqual([
      ['nccl_desync', 'node-b', 2, 'none'],
      ['nccl_hang', 'node-b', 3, 'watch'],
    ]);
    const desync = opened[0];
    expect(desync.evidence).toMatchObject({ pg: '0', pg_name: 'default_pg', pg_known: true, seq: 808 });
    expect(Object.keys(desync.evidence.ops as object).sort()).toEqual(['ALLREDUCE', '_ALLGATHER_BASE']);
    expect(desync.summary).toContain('rank 2 in _ALLGATHER_BASE');
    expect(opened[1].evidence).toMatchObject({
      signals: ['behind_in_process_group'],
      timeouts: { timed_out: 4 },
    });
  });

  it('names no rank behind when the group is not known, even when SeqNums differ (pytorch#118369)', () => {
    const f = judge(collect('nccl-watchdog-legacy.log', () => 'node-c'));
    expect(f.map((x) => x.type)).toEqual(['nccl_hang']);
    expect(f[0].host).toBe('node-c');
    expect(f[0].rank).toBeUndefined(); // [Rank 0] is the group rank; the global rank was not printed
    expect(f[0].evidence).toMatchObject({
      culprit: 'unknown',
      timeouts: { first: { group_rank: 0, seq: 96120 } },
    });
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

  it('a send and a recv at one SeqNum of a known group are a pair, not a desync', () => {
    const fault = (op: string, rank: number) =>
      ({
        v: 1,
        kind: 'fault',
        ts: T0 + rank,
        host: `h${rank}`,
        job: 'j',
        rank,
        source: 'nccl_timeout',
        message: '',
        seq: 12,
        op,
        group_rank: rank,
        pg: '7',
      }) as RankwatchEvent;
    expect(judge([fault('SEND', 0), fault('RECV', 1)]).map((x) => x.type)).toEqual(['nccl_hang']);
  });

  it('a restart of the job resolves its hang findings', () => {
    const events = collect('nccl-watchdog-desync-derived.log', twoHosts);
    const f = judge([...events, { v: 1, kind: 'job_event', ts: T0 + 10_000, job: 'llm', event: 'restart' }]);
    const resolved = f.filter((x) => x.state === 'resolved');
    expect(resolved.map((x) => x.type).sort()).toEqual(['nccl_desync', 'nccl_hang']);
    expect(resolved.find((x) => x.type === 'nccl_hang')?.evidence).toMatchObject({
      resolved_reason: 'job_restarted',
    });
  });
});
