/**
 * The sharded layout in one process, for every simulated fault family: shard stages fed by
 * host-group key, a job stage fed the job's events and the shards' records in three orders (the
 * two topics arrive in none fixed), against one runner over the same events, as `replay` runs it.
 * The same on the real broker: tests/kafka-sharded.int.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { FAMILY_FAULTS } from '../sim/fault-families.js';
import { HostGroupKeys, parseShardKey } from '../stream/host-groups.js';
import { JobStageRunner } from './job-stage.js';
import { ShardStageRunner } from './shard-stage.js';
import { simulated as events, shardOut, shardOutput, unsharded } from './sharded.suite.js';
import {
  EDGES_PER_RECORD,
  MEMBERS_EVERY,
  type Member,
  type ReducedCollective,
  type ReducedEdges,
  SHARD_FORMAT,
  type ShardRecord,
  type ShardReduced,
  ShardReducer,
} from './slowlink/shard-reduce.js';

/** Each hang finding event: state, event time, onset, rank and the signs that named it. */
const hangStory = (fs: Finding[]) =>
  fs
    .filter((f) => f.type === 'nccl_hang')
    .map((f) =>
      [
        f.id,
        f.state,
        f.ts,
        f.onset_ts,
        f.host,
        f.gpu,
        f.rank,
        (f.evidence as { signals?: string[] }).signals,
      ].join(' '),
    );

/** Each incident once: id, type, host, GPU, onset. */
const incidents = (fs: Finding[]) =>
  [
    ...new Map(
      fs.map((f) => [f.id, `${f.id} ${f.type} ${f.host} ${f.gpu ?? '-'} ${f.onset_ts ?? '-'}`]),
    ).values(),
  ].sort();

type Order = 'interleaved' | 'job events first' | 'shard records first';

function sharded(input: RankwatchEvent[], shards: number, order: Order): Finding[] {
  const jobStage = new JobStageRunner();
  const { found, records, jobEvents } = shardOut(input, shards);
  const feed = (a: number, b: number) => {
    let i = 0;
    let j = 0;
    while (i < jobEvents.length || j < records.length) {
      for (let k = 0; k < a && i < jobEvents.length; k++) jobStage.push(jobEvents[i++]);
      for (let k = 0; k < b && j < records.length; k++) jobStage.shardRecord(records[j++]);
    }
  };
  if (order === 'interleaved') feed(37, 53);
  else if (order === 'job events first') feed(jobEvents.length, records.length);
  else for (const r of records) jobStage.shardRecord(r);
  if (order === 'shard records first') for (const e of jobEvents) jobStage.push(e);
  jobStage.endOfInput();
  found.push(...jobStage.take().findings);
  return found;
}

/** One shard stage's records over every host group, and the job's events for its job stage. */
function oneShard(input: RankwatchEvent[]): { records: unknown[]; jobEvents: RankwatchEvent[] } {
  const shard = new ShardStageRunner();
  const records: unknown[] = [];
  const jobEvents: RankwatchEvent[] = [];
  for (const b of new HostGroupKeys({ groupHosts: 1 }).batch(structuredClone(input), 500)) {
    if (!parseShardKey(b.key)) {
      jobEvents.push(...(b.events as RankwatchEvent[]));
      continue;
    }
    shard.keyed(b.key);
    for (const e of b.events) shard.push(e as RankwatchEvent);
    records.push(...(shard.take().shard ?? []));
  }
  shard.flush();
  records.push(...(shard.take().shard ?? []));
  return { records, jobEvents };
}

describe('the sharded layout finds what one process finds', () => {
  for (const [family, fault] of Object.entries(FAMILY_FAULTS)) {
    it(`${family}: 2 and 4 shards, the job stage's inputs in any order`, () => {
      const input = events(fault);
      const want = unsharded(input);
      expect(want.length).toBeGreaterThan(0);
      const runs: [number, Order][] = [
        [2, 'interleaved'],
        [2, 'job events first'],
        [2, 'shard records first'],
        [4, 'interleaved'],
      ];
      for (const [shards, order] of runs) {
        const got = sharded(input, shards, order);
        expect(incidents(got), `${shards} shards, ${order}`).toEqual(incidents(want));
        // A hang is told as replay tells it: opened, updated and resolved at the same event time, on the same rank, by the same signs.
        expect(hangStory(got), `${shards} shards, ${order}`).toEqual(hangStory(want));
      }
    });
  }

  it('a hang is found within a minute of the stall by its live signs (the GPU gone idle), not at the watchdog timeouts', () => {
    for (const family of ['hang', 'hang_allreduce'] as const) {
      const input = events(FAMILY_FAULTS[family]);
      const opened = sharded(input, 4, 'shard records first').find(
        (f) => f.type === 'nccl_hang' && f.state === 'open',
      )!;
      expect(opened.rank).toBe(30);
      expect((opened.evidence as { signals: string[] }).signals).toContain('gpu_idle');
      // The rank stopped at step 40 (~49 s): found ~30 s later, ten minutes before its peers' watchdogs fire.
      expect(opened.ts - opened.onset_ts!).toBeLessThan(60_000);
      const timeout = input.find((e) => e.kind === 'fault' && e.source === 'nccl_timeout')!;
      expect(opened.ts).toBeLessThan(timeout.ts - 500_000);
    }
  });

  it("several jobs in one job stage: a hang is judged on its job's own time, not on the others' further on", () => {
    // Each job on hosts of its own, the hang's job behind the others in the records.
    const input = [
      ...events(FAMILY_FAULTS.hang).map((e) => ({ ...e, job: 'hung' }) as RankwatchEvent),
      ...events(FAMILY_FAULTS.slow_rank).map(
        (e) =>
          JSON.parse(
            JSON.stringify({ ...e, job: 'other' }).replace(/"gpu-(\d{4})"/g, '"o-$1"'),
          ) as RankwatchEvent,
      ),
    ].sort((a, b) => a.ts - b.ts);
    const want = unsharded(input);
    for (const order of ['interleaved', 'job events first', 'shard records first'] as const) {
      const got = sharded(input, 2, order);
      expect(incidents(got), order).toEqual(incidents(want));
      expect(hangStory(got), order).toEqual(hangStory(want));
    }
  });

  it("a host group whose signs stop holds its job's hang back only so long, then the hang is judged without it", () => {
    let wall = 0;
    const stage = new JobStageRunner({}, { holdMs: 60_000, now: () => wall });
    // The first 100 s: the hang began at ~49 s, its peers' watchdogs are ten minutes off.
    const input = events(FAMILY_FAULTS.hang).filter((e) => e.ts <= 100_000);
    const { records, jobEvents } = shardOut(input, 2);
    // Group 5's signs stop at 40 s (its marks still come): the others' signs wait for it.
    const cut = records.filter((r) => {
      const x = r as { t: string; group?: number; ts?: number };
      return !(x.t === 'signs' && x.group === 5 && x.ts! > 40_000);
    });
    for (const e of jobEvents) stage.push(e);
    for (const r of cut) stage.shardRecord(r);
    stage.advance(100_000);
    // Not judged on what half the job's GPUs said.
    expect(stage.take().findings.filter((f) => f.type === 'nccl_hang')).toEqual([]);
    wall = 61_000;
    stage.advance(100_000);
    const opened = stage.take().findings.find((f) => f.type === 'nccl_hang' && f.state === 'open');
    expect(opened).toMatchObject({ rank: 30, host: 'gpu-0003', gpu: 6, ts: 79_000, onset_ts: 49_000 });
    expect((opened!.evidence as { signals: string[] }).signals).toEqual(['gpu_idle']);
  });

  it('signs that come after the restart they precede (their shards behind past the hold) do not open the hang again', () => {
    let wall = 0;
    const stage = new JobStageRunner({}, { holdMs: 60_000, now: () => wall });
    const input = events(FAMILY_FAULTS.hang);
    const { records, jobEvents } = shardOut(input, 2);
    // The shards are behind: their signs of the first 100 s came, the rest comes after the hold.
    const late = (r: unknown) => {
      const x = r as { t: string; ts?: number };
      return x.t === 'signs' && x.ts! > 100_000;
    };
    for (const r of records.filter((r) => !late(r))) stage.shardRecord(r);
    for (const e of jobEvents) stage.push(e);
    wall = 61_000;
    stage.advance(jobEvents.at(-1)!.ts);
    // The job went on without them: the restart ended its hang, then it finished.
    for (const r of records.filter(late)) stage.shardRecord(r);
    stage.endOfInput();
    const opened = stage.take().findings.filter((f) => f.type === 'nccl_hang' && f.state === 'open');
    // One hang, the stall's (judged past the hold as late signs are: replay's id is not promised).
    expect(opened).toHaveLength(1);
    expect(opened[0]).toMatchObject({ rank: 30, host: 'gpu-0003', gpu: 6, onset_ts: 49_000 });
  });

  it('a host group gone quiet holds its job back only holdMs, also on a bus never idle', () => {
    let wall = 0;
    const stage = new JobStageRunner({}, { holdMs: 60_000, now: () => wall });
    const input = events(FAMILY_FAULTS.nic);
    const { records, jobEvents } = shardOut(input, 2);
    // Group 5's shard dies after step 60: none of its records or marks come any more.
    const cut = records.filter((r) => {
      const x = r as { group?: number; step?: number; through?: number };
      return x.group !== 5 || (x.step ?? x.through ?? 0) <= 60;
    });
    for (const r of cut) stage.shardRecord(r);
    for (const e of jobEvents) stage.push(e);
    stage.take();
    expect(stage.heldFrom().size, 'steps after 60 wait for group 5').toBe(1);
    // Other jobs keep the bus busy: deliveries and takes, never an idle advance.
    const busy = events(FAMILY_FAULTS.slow_rank).map((e) => ({ ...e, job: 'busy' }) as RankwatchEvent);
    let i = 0;
    const deliver = () => {
      for (let k = 0; k < 200 && i < busy.length; k++) stage.push(busy[i++]);
      return stage.take();
    };
    wall = 59_000;
    deliver();
    expect(stage.heldFrom().size, 'before holdMs').toBe(1);
    wall = 61_000;
    deliver();
    expect(stage.heldFrom().size, 'after holdMs').toBe(0);
  });

  it('records sent twice (a shard replaced mid-stream sends its uncommitted steps again) change nothing', () => {
    const input = events(FAMILY_FAULTS.nic);
    const want = incidents(unsharded(input));
    const jobStage = new JobStageRunner();
    const { records, jobEvents } = oneShard(input);
    for (const r of records) jobStage.shardRecord(structuredClone(r));
    for (const r of records) jobStage.shardRecord(structuredClone(r));
    for (const e of jobEvents) jobStage.push(e);
    jobStage.endOfInput();
    expect(incidents(jobStage.take().findings)).toEqual(want);
  });

  it('records of another format are refused, told once per format and host group, and change nothing', () => {
    const input = events(FAMILY_FAULTS.nic);
    const want = incidents(unsharded(input));
    const told: string[] = [];
    const jobStage = new JobStageRunner(
      {},
      { onRefused: (format, source) => told.push(`${format} ${source}`) },
    );
    const { records, jobEvents } = oneShard(input);
    // A newer shard's records (a duration that means something else), an older one's (no format), garbage.
    const newer = records.map((r) => ({ ...(r as object), format: SHARD_FORMAT + 1, min_ms: 1e6 }));
    const older = records.map((r) => {
      const { format: _, ...rest } = r as { format: number };
      return rest;
    });
    for (const r of [...newer, ...older, null, 'x', 42]) jobStage.shardRecord(r);
    for (const r of records) jobStage.shardRecord(r);
    for (const e of jobEvents) jobStage.push(e);
    jobStage.endOfInput();
    expect(incidents(jobStage.take().findings)).toEqual(want);
    expect(jobStage.refusals().records).toBe(newer.length + older.length + 3);
    // Each (format, host group) once: 8 host groups, two formats; then what carries no job.
    const groups = Array.from({ length: 8 }, (_, g) => `j/hostgroup-${g}`);
    expect(told).toEqual([
      ...groups.map((g) => `${SHARD_FORMAT + 1} ${g}`),
      ...groups.map((g) => `none ${g}`),
      'none ?',
    ]);
  });

  it('a host group that never reports holds its job only so long, then the job goes on without it', () => {
    let wall = 0;
    const jobStage = new JobStageRunner({}, { holdMs: 60_000, now: () => wall });
    const input = events(FAMILY_FAULTS.slow_rank);
    const announced = input.map((e) => (e.kind === 'job' ? { ...e, host_groups: 2 } : e));
    // No shard ever sends anything: every step waits.
    for (const e of announced) if (e.kind !== 'gpu' && e.kind !== 'collective') jobStage.push(e);
    jobStage.advance(announced.at(-1)!.ts);
    expect(jobStage.take().findings).toHaveLength(0);
    wall = 61_000;
    jobStage.advance(announced.at(-1)!.ts);
    // The straggler is found from the steps alone, as it would be without collectives.
    expect(jobStage.take().findings.map((f) => f.type)).toContain('straggler');
  });

  it("a job whose collectors send no collectives goes on step by step, not at the shards' idle flush or the hold", () => {
    const input = events(FAMILY_FAULTS.slow_rank).filter((e) => e.kind !== 'collective');
    const want = incidents(unsharded(input));
    const shards = [new ShardStageRunner(), new ShardStageRunner()];
    const jobStage = new JobStageRunner({}, { now: () => 0 }); // wall time stands still: no hold runs out
    const found: Finding[] = [];
    for (const b of new HostGroupKeys({ groupHosts: 1 }).batch(structuredClone(input), 500)) {
      const key = parseShardKey(b.key);
      if (!key) for (const e of b.events) jobStage.push(e as RankwatchEvent);
      else {
        const s = shards[key.group % 2];
        s.keyed(b.key);
        for (const e of b.events) s.push(e as RankwatchEvent);
        for (const r of s.take().shard ?? []) jobStage.shardRecord(r);
      }
    }
    // The shards never went idle, nor flushed: the straggler is found from their marks alone.
    found.push(...jobStage.take().findings);
    expect(found.map((f) => f.type)).toContain('straggler');
    for (const s of shards) {
      s.flush();
      for (const r of s.take().shard ?? []) jobStage.shardRecord(r);
    }
    jobStage.endOfInput();
    found.push(...jobStage.take().findings);
    expect(incidents(found)).toEqual(want);
  });

  it("a shard sends a communicator's members when they first come, when they change and every so many steps", () => {
    const reducer = new ShardReducer();
    const out: ShardRecord[] = [];
    for (let step = 0; step < 40; step++)
      for (let rank = 0; rank < (step < 10 ? 2 : 3); rank++)
        reducer.add(
          {
            v: 1,
            kind: 'collective',
            ts: step * 1000 + rank,
            job: 'j',
            rank,
            host: 'h0',
            gpu: rank,
            step,
            op: 'allreduce',
            comm: 'dp',
            bytes: 1 << 20,
            dur_ms: 5,
          },
          0,
          out,
        );
    reducer.flush(out, 40_000);
    const sent = out.filter((r): r is ReducedCollective => r.t === 'reduced');
    expect(sent).toHaveLength(40);
    expect(sent.filter((r) => r.members).map((r) => [r.step, r.members!.length])).toEqual([
      [0, 2],
      [10, 3],
      [10 + MEMBERS_EVERY, 3],
    ]);
  });

  it("a shard sends a group's p2p edges of a step in records of a bounded size, each edge once with both ends' reports", () => {
    const reducer = new ShardReducer();
    const out: ShardRecord[] = [];
    const pairs = EDGES_PER_RECORD + 904;
    const p2p = (rank: number, op: 'send' | 'recv', peer: number, dur_ms: number) =>
      reducer.add(
        {
          ...{ v: 1, kind: 'collective', ts: 1000 + rank, job: 'j', rank, host: `h${rank >> 3}` },
          ...{ gpu: rank % 8, step: 0, op, comm: `pp${rank >> 1}`, peer, bytes: 1 << 20, dur_ms },
        },
        0,
        out,
      );
    for (let i = 0; i < pairs; i++) p2p(2 * i, 'send', 2 * i + 1, 7);
    for (let i = 0; i < pairs; i++) p2p(2 * i + 1, 'recv', 2 * i, 5);
    reducer.flush(out, 2_000);
    const parts = out.filter((r): r is ReducedEdges => r.t === 'edges');
    expect(parts.map((r) => r.edges.length)).toEqual([EDGES_PER_RECORD, pairs - EDGES_PER_RECORD]);
    const edges = parts.flatMap((r) => r.edges);
    // Each edge once, in the order they first came.
    expect(edges.map((e) => e[1])).toEqual(Array.from({ length: pairs }, (_, i) => 2 * i));
    // Both ends' reports in one edge: the sender's fields, the shortest and longest time, two reports.
    expect(edges.every((e) => e[0] === 'send' && e[8] === 5 && e[9] === 7 && e[10] === 2)).toBe(true);
    // Each host named once per record, the edges naming it by index: the sender's and the peer's.
    for (const r of parts) {
      expect(new Set(r.hosts).size).toBe(r.hosts.length);
      for (const e of r.edges) expect([r.hosts[e[2]], e[5]]).toEqual([`h${e[1] >> 3}`, null]);
    }
  });

  it('a job stage that never saw a group send its members judges no communicator of it until it does, then finds what replay finds', () => {
    const input = events(FAMILY_FAULTS.nic);
    const want = unsharded(input).filter((f) => f.type === 'slow_link');
    const { records, jobEvents } = shardOut(input, 2);
    // Started after the shards sent their first lists: it gets every record, less those.
    const late = records.filter(
      (r) => !((r as ShardRecord).t === 'reduced' && (r as ReducedCollective).step === 0),
    );
    const jobStage = new JobStageRunner();
    for (const r of late) jobStage.shardRecord(r);
    for (const e of jobEvents) jobStage.push(e);
    jobStage.endOfInput();
    const got = jobStage.take().findings.filter((f) => f.type === 'slow_link');
    expect(jobStage.stats().collectives_members_unknown).toBeGreaterThan(0);
    expect(want.length).toBeGreaterThan(0);
    // Same links blamed, on the same hosts and GPUs; nothing else.
    const where = (fs: Finding[]) =>
      [...new Set(fs.map((f) => `${f.type} ${f.host} ${f.gpu ?? '-'}`))].sort();
    expect(where(got)).toEqual(where(want));
  });

  it("the judge gets each step's members: both parts of a group's step, a group's last list, none it does not know", () => {
    /** What the judge is handed, member ranks per step (the runner's own hand-over, not a stand-in). */
    class Watched extends JobStageRunner {
      readonly judged: [number, number[]][] = [];
      protected override toJobReduced(r: ShardReduced): void {
        if (r.t === 'reduced') this.judged.push([r.step, (r.members ?? []).map((m) => m[0])]);
        super.toJobReduced(r);
      }
    }
    const record = (group: number, step: number, members?: Member[]): ReducedCollective => ({
      t: 'reduced',
      format: SHARD_FORMAT,
      job: 'j',
      group,
      step,
      ts: step * 1000,
      op: 'allreduce',
      comm: 'dp',
      nranks: 4,
      bytes: 1 << 20,
      min_ms: 5,
      max_ms: 6,
      count: members?.length ?? 2,
      busbw_gbs: 1,
      ...(members ? { members } : {}),
    });
    const m = (rank: number): Member => [rank, `h${rank >> 1}`, rank & 1];
    const stage = new Watched();
    // Group 0's step 0 in two parts (an idle flush came between), then group 1's.
    stage.shardRecord(record(0, 0, [m(0)]));
    stage.shardRecord(record(0, 0, [m(1)]));
    stage.shardRecord(record(1, 0, [m(2), m(3)]));
    // Step 1: group 0's list differs from its last (the second part), group 1's does not.
    stage.shardRecord(record(0, 1, [m(0), m(1)]));
    stage.shardRecord(record(1, 1));
    // Step 2: group 7 sent its list before this job stage started: not judged.
    stage.shardRecord(record(0, 2));
    stage.shardRecord(record(1, 2));
    stage.shardRecord(record(7, 2));
    stage.endOfInput();
    expect(stage.judged).toEqual([
      [0, [0, 1, 2, 3]],
      [1, [0, 1, 2, 3]],
    ]);
    expect(stage.stats().collectives_members_unknown).toBe(1);
  });

  it("a job whose shards lag minutes behind another job's goes neither stale nor late on the other's time", () => {
    // Two jobs on hosts of their own, the second started five minutes after the first. The first
    // job's shards read it up to step 20 and went idle (their idle flush marks the groups complete
    // through the step their collectives reached, before its step events came), then fell behind:
    // the job stage reads all of the second job before the rest of the first. On the second job's
    // time the first would look quiet (no step for minutes); judged so, its open step would close
    // with part of its host groups and the rest would come late (the broker join test under load).
    const first = events(FAMILY_FAULTS.slow_rank).map((e) => ({ ...e, job: 'behind' }) as RankwatchEvent);
    const second = events(FAMILY_FAULTS.nic).map(
      (e) =>
        JSON.parse(
          JSON.stringify({ ...e, job: 'ahead', ts: e.ts + 300_000 }).replace(/"gpu-(\d{4})"/g, '"a-$1"'),
        ) as RankwatchEvent,
    );
    const input = [...first, ...second].sort((a, b) => a.ts - b.ts);
    const want = incidents(unsharded(input));
    const cut = Math.min(...first.filter((e) => e.kind === 'step' && e.step === 20).map((e) => e.ts));
    const shards = [new ShardStageRunner(), new ShardStageRunner()];
    const { found, records, collect } = shardOutput();
    const jobEvents: RankwatchEvent[] = [];
    const feed = (keep: (e: RankwatchEvent) => boolean) => {
      for (const b of new HostGroupKeys({ groupHosts: 1 }).batch(structuredClone(input), 500)) {
        const mine = (b.events as RankwatchEvent[]).filter(keep);
        const key = parseShardKey(b.key);
        if (!key) jobEvents.push(...mine);
        else if (mine.length) {
          const s = shards[key.group % 2];
          s.keyed(b.key);
          for (const e of mine) s.push(e);
          collect(s);
        }
      }
    };
    const early = (e: RankwatchEvent) => e.job === 'behind' && e.ts < cut;
    feed(early);
    for (const s of shards) {
      s.advance(cut + 5_000);
      collect(s);
    }
    const half = records.length;
    feed((e) => !early(e));
    for (const s of shards) {
      s.flush();
      collect(s);
    }
    // The rest of the first job comes from three host groups, then all of the second job, then the
    // first job's last group: its shard is the one behind.
    const jobStage = new JobStageRunner();
    const rest = records.slice(half) as { job?: string; group?: number }[];
    const lagging = (r: { job?: string; group?: number }) => r.job === 'behind' && r.group === 0;
    for (const e of jobEvents) if (e.job === 'behind') jobStage.push(e);
    for (const r of records.slice(0, half)) jobStage.shardRecord(r);
    for (const r of rest) if (r.job === 'behind' && !lagging(r)) jobStage.shardRecord(r);
    for (const e of jobEvents) if (e.job === 'ahead') jobStage.push(e);
    for (const r of rest) if (r.job === 'ahead' || r.job === undefined) jobStage.shardRecord(r);
    for (const r of rest) if (lagging(r)) jobStage.shardRecord(r);
    jobStage.endOfInput();
    found.push(...jobStage.take().findings);
    expect(jobStage.stats().late_steps).toBe(0);
    expect(incidents(found)).toEqual(want);
  });

  it('an idle bus while the shards are behind moves no held job on: its findings stay those of replay', () => {
    const input = events(FAMILY_FAULTS.nic);
    const want = incidents(unsharded(input));
    const { records, jobEvents } = oneShard(input);
    const jobStage = new JobStageRunner();
    // The shards sent half the job; its events wait for the rest (a shard replaced, a slow start)
    // while the bus is idle for an hour, less than the hold.
    const half = Math.floor(records.length / 2);
    for (const r of records.slice(0, half)) jobStage.shardRecord(r);
    for (const e of jobEvents) jobStage.push(e);
    jobStage.advance(jobEvents.at(-1)!.ts + 3_600_000);
    for (const r of records.slice(half)) jobStage.shardRecord(r);
    jobStage.endOfInput();
    expect(incidents(jobStage.take().findings)).toEqual(want);
  });

  it('a throttled GPU found in a shard explains the straggler the job stage finds', () => {
    const input = events(FAMILY_FAULTS.throttle);
    const got = sharded(input, 2, 'interleaved');
    const throttle = got.find((f) => f.type === 'throttle');
    const straggler = got.filter((f) => f.type === 'straggler');
    expect(throttle).toBeDefined();
    expect(straggler.some((f) => f.related?.includes(throttle!.id))).toBe(true);
  });
});

describe('a step a shard sends in parts finds what one process finds', () => {
  /**
   * One job's shard records when its host groups 4-7 move from shard A to shard B mid-stream (a
   * shard joined: A lets them go, B rebuilds them from their partition, output dropped, and goes
   * on), cut at `cut` events, maybe mid-step; with `idle`, A's input went quiet just before.
   */
  function moved(input: RankwatchEvent[], cut: number, idle: boolean) {
    const keys = new HostGroupKeys({ groupHosts: 1 });
    const [a, b] = [new ShardStageRunner(), new ShardStageRunner()];
    const { found, records, collect } = shardOutput();
    const jobEvents: RankwatchEvent[] = [];
    const feed = (s: ShardStageRunner, key: string, events: unknown[]) => {
      s.keyed(key);
      for (const e of events) s.push(e as RankwatchEvent);
    };
    const movedGroup = (key: string) => (parseShardKey(key)?.group ?? 0) >= 4;
    const before = keys.batch(structuredClone(input.slice(0, cut)), 500);
    const after = keys.batch(structuredClone(input.slice(cut)), 500);
    for (const { key, events } of before) {
      if (!parseShardKey(key)) jobEvents.push(...(events as RankwatchEvent[]));
      else {
        feed(a, key, events);
        collect(a);
      }
    }
    if (idle) {
      a.advance(input[cut - 1].ts + 2_000);
      collect(a);
    }
    for (const { key, events } of before)
      if (parseShardKey(key) && movedGroup(key)) {
        a.forget(key); // once per key, as the pipeline does (again: nothing more)
        feed(b, key, events);
      }
    b.take();
    for (const { key, events } of after) {
      if (!parseShardKey(key)) jobEvents.push(...(events as RankwatchEvent[]));
      else {
        const s = movedGroup(key) ? b : a;
        feed(s, key, events);
        collect(s);
      }
    }
    for (const s of [a, b]) {
      s.flush();
      collect(s);
    }
    const jobStage = new JobStageRunner();
    let i = 0;
    let j = 0;
    while (i < jobEvents.length || j < records.length) {
      for (let k = 0; k < 37 && i < jobEvents.length; k++) jobStage.push(jobEvents[i++]);
      for (let k = 0; k < 53 && j < records.length; k++) jobStage.shardRecord(records[j++]);
    }
    jobStage.endOfInput();
    return { found: [...found, ...jobStage.take().findings], records };
  }

  /** Reports per host group 0-3 (those shard A keeps), step and communicator, as the records count them. */
  const kept = (records: unknown[]) => {
    const n = new Map<string, number>();
    for (const r of records as ShardRecord[])
      if (r.t === 'reduced' && r.group < 4) {
        const k = `${r.group} ${r.step} ${r.op} ${r.comm}`;
        n.set(k, (n.get(k) ?? 0) + r.count);
      }
    return n;
  };

  for (const [family, fault] of Object.entries(FAMILY_FAULTS)) {
    it(`${family}: host groups move to a new shard mid-step, after an idle flush or not`, () => {
      const input = events(fault);
      const replayed = unsharded(input);
      const want = incidents(replayed);
      const whole = kept(oneShard(input).records);
      for (const [at, idle] of [
        [0.31, true],
        [0.47, false],
      ] as const) {
        const { found, records } = moved(input, Math.floor(input.length * at), idle);
        expect(incidents(found), `cut at ${at}, idle ${idle}`).toEqual(want);
        // A hang across the move is told as replay tells it (one incident, the same updates).
        expect(hangStory(found), `cut at ${at}, idle ${idle}`).toEqual(hangStory(replayed));
        // The groups A keeps lose no part of the step the move cut.
        expect(kept(records), `cut at ${at}, idle ${idle}`).toEqual(whole);
      }
    });
  }
});

describe('a shard that runs for months', () => {
  it('sends the open step of a job it has read nothing of for an hour, then keeps nothing of it', () => {
    const shard = new ShardStageRunner();
    const t0 = 1_800_000_000_000;
    const coll = (job: string, rank: number, ts: number, step: number) =>
      ({
        ...{ v: 1, kind: 'collective', ts, job, rank, host: `h${rank >> 3}`, gpu: rank % 8 },
        ...{ step, op: 'allreduce', comm: 'dp0', nranks: 4, bytes: 1 << 20, dur_ms: 5 },
      }) as RankwatchEvent;
    const reducedOf = (job: string) =>
      (shard.take().shard ?? []).filter(
        (r) => (r as ShardRecord).t === 'reduced' && (r as ShardRecord).job === job,
      );
    shard.keyed('old/hostgroup-0');
    for (let rank = 0; rank < 4; rank++) shard.push(coll('old', rank, t0 + rank, 0));
    expect(reducedOf('old')).toEqual([]); // its step is open: no later step, no idle bus
    shard.keyed('busy/hostgroup-0');
    shard.push(coll('busy', 0, t0 + 30 * 60_000, 0));
    expect(reducedOf('old')).toEqual([]);
    shard.keyed('busy/hostgroup-0');
    shard.push(coll('busy', 0, t0 + 62 * 60_000, 1));
    const sent = reducedOf('old') as ReducedCollective[];
    expect(sent.map((r) => [r.step, r.count, r.members?.length])).toEqual([[0, 4, 4]]);
    // Forgotten: the job's steps start over if it comes back (its members listed again).
    shard.keyed('old/hostgroup-0');
    for (let rank = 0; rank < 4; rank++) shard.push(coll('old', rank, t0 + 63 * 60_000, 1));
    shard.flush();
    expect((reducedOf('old') as ReducedCollective[]).map((r) => [r.step, r.members?.length])).toEqual([
      [1, 4],
    ]);
  });
});
