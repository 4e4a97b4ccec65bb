/**
 * The slow-link detector on collectives reduced at the edge (collectors/reduce.ts) judges as it
 * does on the simulator's one-per-step events: each simulated collective is split into the
 * several operations NCCL Inspector would report (sizes and times summing to it), sent through
 * the rank map and the reducer with the hook's step events, and the findings compared.
 */
import { describe, expect, it } from 'vitest';
import type { InspectorOp } from '../../collectors/parsers/nccl_inspector.js';
import { RankMap } from '../../collectors/ranks.js';
import { CollectiveReducer, REDUCER_DEFAULTS } from '../../collectors/reduce.js';
import type { CollectiveEvent, RankwatchEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { ClusterSim, type SimOptions } from '../../sim/cluster.js';
import { parseFault } from '../../sim/faults.js';
import { DetectorRunner } from '../runner.js';

/** Inspector reports one record per operation: a step's gradient all-reduce is several buckets. */
const SPLIT = [0.2, 0.3, 0.25, 0.25];
const pidOf = (rank: number) => 20_000 + rank;

function judge(events: Iterable<RankwatchEvent>) {
  const runner = new DetectorRunner();
  for (const e of events) runner.push(e);
  runner.flush();
  return runner.take().findings.filter((f: Finding) => f.type === 'slow_link');
}

/**
 * The simulator's events with every collective replaced by what the edge reduction sends: one
 * collector for the job (every host's dumps in one folder), or `perNode`, one per host, each
 * seeing only its own host's processes (a cross-node p2p peer is then named by its communicator rank).
 */
function* throughTheEdge(
  sim: ClusterSim,
  ranks: number,
  seen: { records: number; reduced: number },
  perNode = false,
) {
  let now = 0;
  const out: CollectiveEvent[] = [];
  const collectors = new Map<string, { map: RankMap; reducer: CollectiveReducer }>();
  const collector = (host: string) => {
    const k = perNode ? host : '';
    let c = collectors.get(k);
    if (!c) {
      const map = new RankMap({ localHosts: [] });
      const reducer = new CollectiveReducer({
        ranks: map,
        ...REDUCER_DEFAULTS,
        emit: (e) => out.push(...e),
        drop: (reason, n) => {
          throw new Error(`dropped ${n} record(s): ${reason}`);
        },
        now: () => now,
      });
      c = { map, reducer };
      collectors.set(k, c);
    }
    return c;
  };
  const seq = new Map<string, number>();
  for (const e of sim.events()) {
    if (e.kind === 'collective') {
      for (const r of records(e, seq)) collector(e.host).reducer.add(r, now);
      seen.records += SPLIT.length;
      continue;
    }
    if (e.kind === 'step') {
      collector(e.host).map.learn([{ ...e, pid: pidOf(e.rank) }]);
      yield e;
      if (e.rank === ranks - 1) {
        now += REDUCER_DEFAULTS.settleMs;
        for (const c of collectors.values()) c.reducer.tick(now);
        seen.reduced += out.length;
        yield* out.splice(0);
      }
      continue;
    }
    yield e;
  }
  for (const c of collectors.values()) c.reducer.flush(now);
  seen.reduced += out.length;
  yield* out.splice(0);
}

/** One simulated collective as the operations Inspector would write, inside its step. */
function records(e: CollectiveEvent, seq: Map<string, number>): InspectorOp[] {
  const p2p = e.op === 'send' || e.op === 'recv';
  // p2p: a two-rank communicator per pipeline pair, as ProcessGroupNCCL makes for send/recv.
  const lo = p2p ? Math.min(e.rank, e.peer!) : 0;
  const comm = p2p ? `pp:${lo}-${Math.max(e.rank, e.peer!)}` : e.comm;
  const commRank = p2p ? (e.rank === lo ? 0 : 1) : e.rank;
  return SPLIT.map((w, k) => {
    const key = `${e.rank}/${comm}/${e.op}`;
    const n = (seq.get(key) ?? 0) + 1;
    seq.set(key, n);
    const bytes =
      k < SPLIT.length - 1
        ? Math.floor(e.bytes * w)
        : e.bytes - SPLIT.slice(0, -1).reduce((a, x) => a + Math.floor(e.bytes * x), 0);
    return {
      host: e.host,
      pid: pidOf(e.rank),
      comm,
      commRank,
      nranks: e.nranks ?? 2,
      op: e.op,
      seq: n,
      bytes,
      execUs: Math.round(e.dur_ms * 1000 * w),
      tMs: e.ts - 40 * (SPLIT.length - k),
      ...(p2p ? { peer: 1 - commRank } : {}),
    };
  });
}

function compare(opts: SimOptions, perNode = false) {
  const native = judge(new ClusterSim(opts).events());
  const seen = { records: 0, reduced: 0 };
  const reduced = judge(throughTheEdge(new ClusterSim(opts), opts.ranks ?? 256, seen, perNode));
  const brief = (f: Finding) => `${f.state} ${f.host}/${f.gpu ?? '-'} ${f.peer_host ?? ''}`;
  return { native, reduced, seen, brief };
}

describe('slow link on edge-reduced collectives', () => {
  it('finds the degraded NIC and the bad pair link as on the native events, as soon', () => {
    const { native, reduced, seen, brief } = compare({
      ranks: 128,
      steps: 200,
      seed: 8,
      faults: [
        parseFault('nic:rank=77,at=40,until=120,factor=3'),
        parseFault('link:rank=10,peer=42,at=60,factor=4'),
      ],
    });
    expect(native.length).toBeGreaterThan(0);
    expect(native.map(brief)).toContain('open gpu-0009/5 ');
    expect(native.map(brief)).toContain('open gpu-0001/2 gpu-0005');
    expect(reduced.map(brief)).toEqual(native.map(brief));
    // Within one step of the native onset (a step here is about a second of event time).
    for (let i = 0; i < native.length; i++)
      expect(Math.abs(reduced[i].ts - native[i].ts)).toBeLessThanOrEqual(1500);
    // Four operations per collective went in; one event per rank, step, communicator and op came out.
    expect(seen.records / seen.reduced).toBe(SPLIT.length);
  }, 60_000);

  it('one collector per node: a cross-node p2p peer, named by its communicator rank, is placed by its own events; the pair link is found', () => {
    const opts = {
      ranks: 128,
      steps: 120,
      seed: 8,
      faults: [parseFault('link:rank=10,peer=42,at=40,factor=4')],
    };
    const { native, reduced, brief } = compare(opts, true);
    expect(native.map(brief)).toContain('open gpu-0001/2 gpu-0005');
    expect(reduced.map(brief)).toEqual(native.map(brief));
    for (let i = 0; i < native.length; i++)
      expect(Math.abs(reduced[i].ts - native[i].ts)).toBeLessThanOrEqual(1500);
    // What the node collectors sent: cross-node transfers by communicator rank, both ends.
    const seen = { records: 0, reduced: 0 };
    const sent = [...throughTheEdge(new ClusterSim(opts), 128, seen, true)].filter(
      (e): e is CollectiveEvent => e.kind === 'collective' && (e.op === 'send' || e.op === 'recv'),
    );
    const cross = sent.filter((e) => e.peer === undefined);
    expect(cross.length).toBeGreaterThan(0);
    for (const e of cross.slice(0, 20))
      expect(e).toMatchObject({ peer_comm_rank: expect.any(Number), comm_rank: expect.any(Number) });
  }, 60_000);

  it('opens nothing on a clean job', () => {
    const { native, reduced } = compare({ ranks: 128, steps: 120, seed: 9 });
    expect(native).toEqual([]);
    expect(reduced).toEqual([]);
  }, 60_000);
});
