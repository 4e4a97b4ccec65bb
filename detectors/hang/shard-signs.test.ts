/**
 * What a shard sends the job stage of the hang detector's signs (shard-signs.ts): little in a
 * healthy job, the changes that matter when a GPU goes idle or silent or the collectives stop, and
 * enough for a job stage started mid-stream. The equality with replay on every fault family is
 * detectors/sharded.test.ts's.
 */
import { describe, expect, it } from 'vitest';
import type { CollectiveEvent, GpuEvent, RankwatchEvent } from '../../schema/events.js';
import { ClusterSim } from '../../sim/cluster.js';
import { HostGroupKeys, parseShardKey } from '../../stream/host-groups.js';
import { ShardStageRunner } from '../shard-stage.js';
import { BUSY, IDLE, JobProgress } from './progress.js';
import { FULL_EVERY, QUIET_MS, type ShardSigns, SignsMirror, SignsTracker } from './shard-signs.js';

const gpu = (ts: number, rank: number, util: number): GpuEvent => ({
  v: 1,
  kind: 'gpu',
  ts,
  host: 'h0',
  gpu: rank,
  job: 'j',
  rank,
  sm_clock_mhz: 1980,
  util_pct: util,
  power_w: util > 50 ? 650 : 70,
  throttle_reasons: 0,
});

/** A rank's all-reduce of one step on the data-parallel communicator, with its sequence number. */
const ALLREDUCE = {
  v: 1,
  kind: 'collective',
  job: 'j',
  host: 'h0',
  op: 'allreduce',
  comm: 'dp',
  bytes: 1 << 20,
  dur_ms: 5,
} as const;
const coll = (ts: number, rank: number, step: number) =>
  ({ ...ALLREDUCE, ts, rank, gpu: rank, step, seq: step + 1 }) as CollectiveEvent;

/** Four ranks on one host for `seconds`: a sample a second each, and a step's collective each until `collUntil`. */
function run(
  seconds: number,
  o: { collUntil?: number; silent?: [number, number, number]; idleFrom?: [number, number] } = {},
) {
  const t = new SignsTracker();
  const out: ShardSigns[] = [];
  for (let s = 0; s < seconds; s++) {
    const ts = s * 1000;
    for (let r = 0; r < 4; r++) {
      const [who, from, to] = o.silent ?? [-1, 0, 0];
      if (r === who && s >= from && s < to) continue;
      const idle = o.idleFrom && r === o.idleFrom[0] && s >= o.idleFrom[1];
      t.add(gpu(ts, r, idle ? 0 : 100), 0, out as unknown[]);
    }
    if (s < (o.collUntil ?? seconds))
      for (let r = 0; r < 4; r++) t.add(coll(ts + 500, r, s), 0, out as unknown[]);
  }
  t.flush(out as unknown[]);
  return out;
}

describe('the hang signs a shard sends', () => {
  it('a healthy job: one small record per group and second, all its GPUs in the first, no rank in any', () => {
    const out = run(30);
    expect(out.length).toBeGreaterThanOrEqual(29);
    expect(out[0].gpus?.map((g) => [g[0], g[3]])).toEqual([
      [0, BUSY],
      [1, BUSY],
      [2, BUSY],
      [3, BUSY],
    ]);
    expect(out.slice(1).filter((r) => r.gpus || r.stale || r.ranks)).toEqual([]);
    // The collectives' front moves on with them.
    expect(out.at(-1)!.front ?? out.at(-2)!.front).toBeDefined();
  });

  it('a GPU that goes idle is told once, with since when', () => {
    const out = run(30, { idleFrom: [1, 12] });
    const told = out.slice(1).flatMap((r) => r.gpus ?? []);
    expect(told).toEqual([[1, 'h0', 1, IDLE, 12_000, 0, 70]]);
  });

  it('a GPU whose samples stop is told once, with its last sample; when they come back, so is its verdict', () => {
    const out = run(40, { silent: [2, 10, 25] });
    const stale = out.flatMap((r) => r.stale ?? []);
    expect(stale).toEqual([[2, 9_000]]);
    const back = out.filter((r) => r.ts >= 25_000).flatMap((r) => r.gpus ?? []);
    expect(back.map((g) => g[0])).toEqual([2]);
  });

  it("once a group's collectives are quiet, each rank's progress goes out once: its last report and sequence numbers", () => {
    const out = run(40, { collUntil: 5 });
    const sent = out.filter((r) => r.ranks);
    expect(sent).toHaveLength(1);
    expect(sent[0].ts - 4_500).toBeGreaterThanOrEqual(QUIET_MS);
    // Before the detector could call the job stalled (30 s at least).
    expect(sent[0].ts - 4_500).toBeLessThan(30_000);
    expect(sent[0].ranks!.map(([rank, , , lastTs, step, seqs]) => [rank, lastTs, step, seqs])).toEqual(
      [0, 1, 2, 3].map((r) => [r, 4_500, -1, [['dp', 'allreduce', 5, 'dp']]]),
    );
  });

  it('a job stage started mid-stream knows every GPU of the group within FULL_EVERY records', () => {
    const out = run(FULL_EVERY + 20);
    const mirror = new SignsMirror();
    const p = new JobProgress(100);
    // It missed the first record (all GPUs) and every later one is only changes: none.
    for (const r of out.slice(1)) mirror.apply({ ...r, ts: r.ts + 60_000 }, () => p);
    for (let r = 0; r < 4; r++) expect(p.gpuState[r], `rank ${r}`).toBe(BUSY);
  });

  it('a sample naming no job or rank is placed by the collectives of its GPU; one never placed is left out', () => {
    const t = new SignsTracker();
    const out: unknown[] = [];
    const bare = (ts: number, g: number): GpuEvent => {
      const { job: _j, rank: _r, ...e } = gpu(ts, g, 0);
      return { ...e, gpu: g };
    };
    t.add(coll(0, 1, 0), 0, out);
    t.add(bare(100, 1), 0, out);
    t.add(bare(100, 3), 0, out);
    t.flush(out);
    expect((out as ShardSigns[]).flatMap((r) => r.gpus ?? []).map((g) => g[0])).toEqual([1]);
  });

  it('a job heard from no more for an hour is forgotten: its GPUs are sent again, all of them, when it comes back', () => {
    const t = new SignsTracker();
    const out: ShardSigns[] = [];
    for (const ts of [0, 1_000, 2_000])
      for (let r = 0; r < 2; r++) t.add(gpu(ts, r, 100), 0, out as unknown[]);
    // Another job goes on for an hour and more.
    for (let ts = 0; ts <= 3_700_000; ts += 60_000)
      t.add({ ...gpu(ts, 0, 100), job: 'other', host: 'h9' }, 1, out as unknown[]);
    for (const ts of [3_701_000, 3_702_000, 3_703_000])
      for (let r = 0; r < 2; r++) t.add(gpu(ts, r, 100), 0, out as unknown[]);
    const back = out.filter((r) => r.job === 'j' && r.ts > 3_000_000);
    expect(back[0].gpus?.map((g) => g[0])).toEqual([0, 1]);
  });

  it('cost: a healthy 4,096-rank job sends under one byte of signs per raw event (≈0.25), well under 1% of the raw bytes', () => {
    const ranks = 4096;
    const input = [...new ClusterSim({ job: 'j', ranks, steps: 15, seed: 5, startTs: 0 }).events()];
    const shard = new ShardStageRunner();
    let raw = 0;
    let signs = 0;
    let records = 0;
    const count = (rs: unknown[] | undefined) => {
      for (const r of rs ?? [])
        if ((r as { t: string }).t === 'signs') {
          signs += JSON.stringify(r).length + 1;
          records++;
        }
    };
    // The bench's groups: 16 of 32 hosts.
    for (const b of new HostGroupKeys({ groupHosts: ranks / 8 / 16 }).batch(input, 4096)) {
      for (const e of b.events) raw += JSON.stringify(e).length + 1;
      if (!parseShardKey(b.key)) continue;
      shard.keyed(b.key);
      for (const e of b.events) shard.push(e as RankwatchEvent);
      count(shard.take().shard);
    }
    shard.flush();
    count(shard.take().shard);
    const seconds = (input.at(-1)!.ts - input[0].ts) / 1000;
    expect(records).toBeLessThanOrEqual(16 * (Math.ceil(seconds) + 2));
    expect(signs / input.length).toBeLessThan(1);
    expect(signs / raw).toBeLessThan(0.005);
  });
});
