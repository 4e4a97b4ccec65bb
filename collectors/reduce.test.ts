import { beforeEach, describe, expect, it } from 'vitest';
import type { CollectiveEvent } from '../schema/events.js';
import type { InspectorOp } from './parsers/nccl_inspector.js';
import { RankMap } from './ranks.js';
import { CollectiveReducer, type DropReason, REDUCER_DEFAULTS, stepOf } from './reduce.js';

let now = 0;
let out: (CollectiveEvent & Record<string, unknown>)[] = [];
let drops: Record<string, number> = {};
let why: string[] = [];
let ranks: RankMap;
let red: CollectiveReducer;

function setup(o: Partial<typeof REDUCER_DEFAULTS> = {}) {
  now = 1_000_000;
  out = [];
  drops = {};
  why = [];
  ranks = new RankMap({ localHosts: ['node-a'], readEnviron: () => '' });
  red = new CollectiveReducer({
    ranks,
    ...REDUCER_DEFAULTS,
    ...o,
    emit: (e) => out.push(...(e as typeof out)),
    drop: (r: DropReason, n, d) => {
      drops[r] = (drops[r] ?? 0) + n;
      if (d) why.push(d);
    },
    now: () => now,
  });
}

/** The hook's step event of rank `rank` (pid 1000 + rank) ending at `end`. */
const stepEnd = (rank: number, step: number, end: number, stepMs = 1000) =>
  ranks.learn([
    {
      v: 1,
      kind: 'step',
      ts: end,
      job: 'llm',
      rank,
      host: 'node-a',
      gpu: rank,
      pid: 1000 + rank,
      step,
      step_ms: stepMs,
      compute_ms: 1,
    },
  ]);

const op = (rank: number, tMs: number, o: Partial<InspectorOp> = {}): InspectorOp => ({
  host: 'node-a',
  pid: 1000 + rank,
  comm: '0xdp',
  commRank: rank,
  nranks: 8,
  op: 'allreduce',
  seq: 0,
  bytes: 1 << 20,
  execUs: 1000,
  tMs,
  ...o,
});

beforeEach(() => setup());

describe('the edge reduction', () => {
  it("sums one rank's operations per step, communicator and op, each in the step whose window holds it", () => {
    stepEnd(0, 4, 10_000);
    stepEnd(0, 5, 11_000);
    const recs = [
      op(0, 10_100, { seq: 10, execUs: 900, busbwGbs: 100 }),
      op(0, 10_500, { seq: 11, execUs: 2500, busbwGbs: 50 }),
      op(0, 11_000, { seq: 12, execUs: 1100, bytes: 3 << 20 }), // at the end: still step 5
      op(0, 10_600, { op: 'allgather', seq: 3, execUs: 400 }),
      op(0, 9_500, { seq: 9, execUs: 700 }), // step 4
    ];
    for (const r of recs) red.add(r, now);
    red.tick(now);
    expect(out).toEqual([]); // sent only once late records have had settleMs
    now += REDUCER_DEFAULTS.settleMs;
    red.tick(now);
    const ev = (s: number, o: string) => out.find((e) => e.step === s && e.op === o);
    expect(out).toHaveLength(3);
    expect(ev(5, 'allreduce')).toEqual({
      v: 1,
      kind: 'collective',
      ts: 11_000,
      job: 'llm',
      rank: 0,
      host: 'node-a',
      gpu: 0,
      step: 5,
      op: 'allreduce',
      comm: '0xdp',
      nranks: 8,
      bytes: (1 << 20) + (1 << 20) + (3 << 20),
      dur_ms: 0.9 + 2.5 + 1.1,
      count: 3,
      max_ms: 2.5,
      busbw_gbs: 75,
      seq: 12,
    });
    expect(ev(5, 'allgather')).toMatchObject({ count: 1, seq: 3, dur_ms: 0.4 });
    expect(ev(4, 'allreduce')).toMatchObject({ count: 1, seq: 9 });
    expect(red.stats()).toEqual({ held: 0, ranks: 1, windows: 0 });
  });

  it('holds records of a step still running until its end arrives, whichever comes first', () => {
    stepEnd(0, 0, 10_000);
    red.add(op(0, 10_400, { seq: 1 }), now);
    red.add(op(0, 11_300, { seq: 2 }), now); // after step 1's end: step 2
    expect(red.stats().held).toBe(2);
    stepEnd(0, 1, 11_000);
    expect(red.stats().held).toBe(1);
    now += REDUCER_DEFAULTS.settleMs;
    red.tick(now);
    expect(out.map((e) => [e.step, e.seq])).toEqual([[1, 1]]);
    stepEnd(0, 2, 12_000);
    now += REDUCER_DEFAULTS.settleMs;
    red.tick(now);
    expect(out.map((e) => [e.step, e.seq])).toEqual([
      [1, 1],
      [2, 2],
    ]);
  });

  it('drops what falls outside every known step, and what comes after its step was sent', () => {
    stepEnd(0, 7, 10_000, 1000);
    red.add(op(0, 8_000), now); // before step 7's window (step 6 unknown)
    stepEnd(0, 9, 13_000, 1000); // step 8 never reported: (10 s, 12 s] belongs to no known step
    red.add(op(0, 11_000), now);
    red.add(op(0, 12_500, { seq: 5 }), now);
    now += REDUCER_DEFAULTS.settleMs;
    red.tick(now);
    expect(out.map((e) => e.step)).toEqual([9]);
    red.add(op(0, 12_900, { seq: 6 }), now);
    expect(drops).toEqual({ outside_steps: 2, late: 1 });
  });

  it('holds an unmapped pid for holdMs, then counts it with the reason; a mapping in time sends it', () => {
    red.add(op(3, 10_500), now);
    red.add(op(4, 10_500), now);
    now += REDUCER_DEFAULTS.holdMs / 2;
    red.tick(now);
    stepEnd(3, 1, 11_000); // the hook's first step names pid 1003
    now += REDUCER_DEFAULTS.holdMs / 2;
    red.tick(now);
    expect(drops).toEqual({ unmapped_pid: 1 });
    expect(why[0]).toMatch(/process 1004 has no RANK/);
    now += REDUCER_DEFAULTS.settleMs;
    red.tick(now);
    expect(out.map((e) => [e.rank, e.step])).toEqual([[3, 1]]);
    expect(out.some((e) => e.rank === 4)).toBe(false);
  });

  it('sends a cumulative open snapshot of a step that runs long (a hang), and not again while nothing moves', () => {
    stepEnd(0, 0, 10_000);
    stepEnd(1, 0, 10_000);
    red.add(op(0, 10_100, { seq: 1 }), now);
    red.add(op(1, 10_100, { seq: 1 }), now);
    red.add(op(1, 10_200, { seq: 2 }), now); // rank 0 never enters seq 2
    now += REDUCER_DEFAULTS.openEveryMs;
    red.tick(now);
    expect(out.map((e) => [e.rank, e.step, e.window, e.seq, e.count])).toEqual([
      [0, 1, 'open', 1, 1],
      [1, 1, 'open', 2, 2],
    ]);
    now += REDUCER_DEFAULTS.openEveryMs;
    red.tick(now);
    expect(out).toHaveLength(2);
    red.add(op(1, 10_300, { seq: 3 }), now);
    now += REDUCER_DEFAULTS.openEveryMs;
    red.tick(now);
    expect(out.slice(2).map((e) => [e.rank, e.seq, e.count])).toEqual([[1, 3, 3]]);
    // The collector stops: the step still running goes out as one last snapshot, nothing dropped.
    red.flush(now);
    expect(out.slice(3).map((e) => [e.rank, e.window, e.seq])).toEqual([
      [0, 'open', 1],
      [1, 'open', 3],
    ]);
    expect(drops).toEqual({});
    expect(red.stats().held).toBe(0);
  });

  it('reports per interval a rank with no step boundaries (no hook), marked as such', () => {
    ranks = new RankMap({
      localHosts: ['node-a'],
      readEnviron: () => 'RANK=6\0LOCAL_RANK=6\0SLURM_JOB_ID=42\0',
    });
    setupWith(ranks);
    red.add(op(6, 20_100, { seq: 1 }), now);
    red.add(op(6, 20_200, { seq: 2 }), now);
    red.add(op(6, 31_000, { seq: 3 }), now);
    red.tick(now);
    expect(out).toEqual([]);
    now += REDUCER_DEFAULTS.holdMs;
    red.tick(now);
    now += REDUCER_DEFAULTS.settleMs;
    red.tick(now);
    expect(out.map((e) => [e.job, e.rank, e.step, e.window, e.interval_ms, e.count, e.seq])).toEqual([
      ['42', 6, 2, 'interval', 10_000, 2, 2],
      ['42', 6, 3, 'interval', 10_000, 1, 3],
    ]);
  });

  it("follows the hook when it names a process the environment named first (the hook's first step is long)", () => {
    ranks = new RankMap({ localHosts: ['node-a'], readEnviron: () => 'RANK=2\0SLURM_JOB_ID=42\0' });
    setupWith(ranks);
    red.add(op(2, 10_300, { seq: 1 }), now);
    red.add(op(2, 10_600, { seq: 2 }), now);
    now += REDUCER_DEFAULTS.holdMs / 2;
    red.tick(now);
    stepEnd(2, 0, 11_000, 2000); // job "llm", as the hook names it
    now += REDUCER_DEFAULTS.holdMs;
    red.tick(now);
    expect(out.map((e) => [e.job, e.rank, e.step, e.window, e.count])).toEqual([['llm', 2, 0, undefined, 2]]);
    expect(drops).toEqual({});
  });

  it("names a p2p peer's global rank when its records were seen, else its communicator rank", () => {
    stepEnd(0, 0, 10_000);
    stepEnd(1, 0, 10_000);
    stepEnd(0, 1, 11_000);
    stepEnd(1, 1, 11_000);
    red.add(op(0, 10_500, { comm: '0xpp', commRank: 0, nranks: 2, op: 'send', peer: 1 }), now);
    red.add(op(1, 10_500, { comm: '0xpp', commRank: 1, nranks: 2, op: 'recv', peer: 0 }), now);
    red.add(op(0, 10_600, { comm: '0xpp', commRank: 0, nranks: 2, op: 'send', peer: 1 }), now);
    red.add(op(0, 10_700, { comm: '0xworld', commRank: 0, nranks: 64, op: 'send', peer: 40 }), now);
    now += REDUCER_DEFAULTS.settleMs;
    red.tick(now);
    const sends = out.filter((e) => e.op === 'send');
    expect(sends.map((e) => [e.comm, e.peer, e.peer_host, e.peer_comm_rank, e.comm_rank, e.count])).toEqual([
      ['0xpp', 1, 'node-a', undefined, undefined, 2],
      // A peer this collector never saw: both ends by their communicator ranks.
      ['0xworld', undefined, undefined, 40, 0, 1],
    ]);
  });

  it('holds at most maxHeld records, oldest of the fullest rank first', () => {
    setup({ maxHeld: 1000 });
    stepEnd(0, 0, 10_000);
    for (let i = 0; i < 5000; i++) red.add(op(0, 10_001 + i / 10, { seq: i }), now);
    expect(red.stats().held).toBeLessThanOrEqual(1000);
    expect(drops.held_full).toBe(5000 - red.stats().held);
  });

  it('keeps its memory flat over many steps: one window per step not yet sent', () => {
    for (let s = 0; s < 2000; s++) {
      for (let r = 0; r < 8; r++) {
        for (let k = 0; k < 20; k++)
          red.add(op(r, 10_000 + s * 1000 + 10 + k * 40, { seq: s * 20 + k }), now);
        stepEnd(r, s, 10_000 + (s + 1) * 1000);
      }
      now += 1000;
      red.tick(now);
    }
    const st = red.stats();
    expect(st.held).toBe(0);
    expect(st.ranks).toBe(8);
    expect(st.windows).toBeLessThanOrEqual(8 * (REDUCER_DEFAULTS.settleMs / 1000 + 1));
    // Every rank-step sent once, but for those still settling (one window each).
    expect(out.length + st.windows).toBe(8 * 2000);
    expect(out.every((e) => e.count === 20)).toBe(true);
  });
});

describe('stepOf', () => {
  const bs = [
    { step: 3, endMs: 100, stepMs: 50 },
    { step: 4, endMs: 200, stepMs: 90 },
    { step: 6, endMs: 400, stepMs: 100 },
  ];
  it('tiles consecutive steps and leaves gaps where a step went unreported', () => {
    expect([40, 60, 100, 101, 200, 250, 301, 400, 401].map((t) => stepOf(bs, t))).toEqual([
      undefined,
      3,
      3,
      4,
      4,
      undefined,
      6,
      6,
      undefined,
    ]);
  });
});

function setupWith(m: RankMap) {
  now = 1_000_000;
  out = [];
  drops = {};
  red = new CollectiveReducer({
    ranks: m,
    ...REDUCER_DEFAULTS,
    emit: (e) => out.push(...(e as typeof out)),
    drop: (r, n) => {
      drops[r] = (drops[r] ?? 0) + n;
    },
    now: () => now,
  });
}
