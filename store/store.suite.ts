/**
 * The conformance suite every store driver passes: chDB (store/chdb.test.ts) and the server driver
 * (tests/clickhouse.int.test.ts). `make` returns a migrated, empty store.
 */
import { describe, expect, it } from 'vitest';
import { DetectorRunner } from '../detectors/runner.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import type { SlowGpu } from '../schema/output.js';
import { validateEvent } from '../schema/validate.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import {
  checkpointSaves,
  checkpointStats,
  failureCounts,
  faultHistory,
  nodeHealth,
} from './health-queries.js';
import { applyMigrations } from './migrate.js';
import { findings, findingsOf, jobs, mfuOverTime, rankHeatmap, tableCounts } from './queries.js';
import { eventRows, findingRow, outputRows } from './rows.js';
import { MIGRATIONS, SCHEMA_DEFAULTS, SCHEMA_OBJECTS } from './schema.js';
import { fleetSlowGpus, jobSlowGpus } from './slow-gpu-queries.js';
import type { Store } from './store.js';

const NASTY = `x'); DROP TABLE findings; -- \\ "quoted" \\' \t{tab} \n line ?? $1 %s`;

/** One simulated job, built once: 16 ranks over ~2 minutes with a slow rank, a throttle, an XID and checkpoints. */
function dataset() {
  const startTs = Math.floor((Date.now() - 3 * 3_600_000) / 60_000) * 60_000;
  const sim = new ClusterSim({
    ranks: 16,
    steps: 120,
    seed: 5,
    startTs,
    collectives: false,
    checkpointEvery: 25,
    faults: [
      parseFault('slow_rank:rank=3,at=5,slowdown=0.5'),
      parseFault('throttle:rank=9,at=40'),
      parseFault('xid:rank=12,at=40'),
    ],
  });
  const events = [...sim.events()] as RankwatchEvent[];
  const runner = new DetectorRunner();
  for (const e of events) runner.push(e);
  runner.flush();
  const out = runner.take();
  return { sim, startTs, events, out, batches: [...eventRows(events), ...outputRows(out)] };
}
let cached: ReturnType<typeof dataset> | undefined;
const data = () => {
  cached ??= dataset();
  return cached;
};

const n = (v: unknown) => Number(v);
const ddl = (s: Store) =>
  s.query<{ name: string; q: string }>(
    'SELECT name, create_table_query AS q FROM system.tables WHERE database = currentDatabase() ORDER BY name',
  );

export function storeSuite(name: string, make: () => Promise<Store>): void {
  describe(`store conformance: ${name}`, () => {
    it('applies migrations idempotently, with TTLs on raw and rollup tables', async () => {
      const s = await make();
      const before = await ddl(s);
      await s.migrate();
      await s.migrate();
      expect(await ddl(s)).toEqual(before);
      const versions = await s.query<{ version: number }>(
        'SELECT version FROM schema_migrations FINAL ORDER BY version',
      );
      expect(versions.map((v) => n(v.version))).toEqual(MIGRATIONS.map((m) => m.version));
      const q = new Map(before.map((r) => [r.name, r.q]));
      expect(q.get('events')).toMatch(/TTL toDateTime\(ts\) \+ toIntervalDay\(30\)/);
      expect(q.get('steps')).toMatch(/TTL toDateTime\(ts\) \+ toIntervalDay\(30\)/);
      for (const t of ['job_minute', 'rank_minute', 'gpu_minute'])
        expect(q.get(t)).toMatch(/TTL minute \+ toIntervalDay\(400\)/);
      for (const t of ['events', 'steps', 'job_minute', 'rank_minute', 'faults'])
        expect(q.get(t)).toMatch(/non_replicated_deduplication_window = 10000/);
      for (const v of [
        'job_minute_mv',
        'rank_minute_mv',
        'gpu_minute_mv',
        'faults_mv',
        'checkpoints_mv',
        'job_events_mv',
      ])
        expect(q.has(v)).toBe(true);
    });

    it('brings TTLs to a changed retention without a new migration, and only once', async () => {
      const s = await make();
      const db = s;
      await applyMigrations(db, { rawTtlDays: 7, rollupTtlDays: 90 });
      const once = await ddl(s);
      await applyMigrations(db, { rawTtlDays: 7, rollupTtlDays: 90 });
      expect(await ddl(s)).toEqual(once);
      const q = new Map(once.map((r) => [r.name, r.q]));
      expect(q.get('events')).toMatch(/toIntervalDay\(7\)/);
      expect(q.get('rank_minute')).toMatch(/toIntervalDay\(90\)/);
      await applyMigrations(db, SCHEMA_DEFAULTS);
    });

    it('applies and records each migration once when two starts race (the migration lock)', async () => {
      const s = await make();
      for (const t of SCHEMA_OBJECTS) await s.exec(`DROP TABLE IF EXISTS ${t}`);
      // Two starters on the same store, each counting the statements it runs.
      const ran: string[] = [];
      const starter = (who: string) => ({
        exec: (sql: string) => {
          if (/^CREATE TABLE IF NOT EXISTS (events|job_minute) /.test(sql))
            ran.push(`${who}:${sql.split(' ')[5]}`);
          return s.exec(sql);
        },
        query: s.query.bind(s),
        insert: s.insert.bind(s),
      });
      const [a, b] = await Promise.all([applyMigrations(starter('a')), applyMigrations(starter('b'))]);
      expect([...a, ...b].sort()).toEqual(MIGRATIONS.map((m) => m.version));
      expect(ran).toHaveLength(2); // events (migration 1) and job_minute (migration 2), by one starter
      const recorded = await s.query<{ version: number }>(
        'SELECT version FROM schema_migrations ORDER BY version',
      );
      expect(recorded.map((r) => n(r.version))).toEqual(MIGRATIONS.map((m) => m.version));
      // And the lock is free again for the next start.
      expect(await applyMigrations(s)).toEqual([]);
    });

    it('keeps one copy of a batch inserted twice, in raw, derived and rollup tables', async () => {
      const s = await make();
      const { events, out, batches, sim } = data();
      expect(out.findings.length).toBeGreaterThan(0);
      await s.insert(batches);
      const rollupsOnce = await rollupTotals(s);
      await s.insert(batches);
      const counts = await tableCounts(s);
      expect(counts.events).toBe(events.length);
      expect(counts.steps).toBe(events.filter((e) => e.kind === 'step').length);
      expect(counts.findings).toBe(out.findings.length);
      expect(counts.mfu).toBe(out.mfu.length);
      expect(await rollupTotals(s)).toEqual(rollupsOnce);
      expect(rollupsOnce.rank_steps).toBe(counts.steps);
      const derived = async (t: string) =>
        n((await s.query<{ c: string }>(`SELECT count() AS c FROM ${t} FINAL`))[0].c);
      expect(await derived('faults')).toBe(events.filter((e) => e.kind === 'fault').length);
      expect(await derived('checkpoints')).toBe(events.filter((e) => e.kind === 'checkpoint').length);
      expect(await derived('job_events')).toBe(
        events.filter((e) => e.kind === 'job' || e.kind === 'job_event').length,
      );
      const stored = await findingsOf(s, sim.opts.job);
      expect(stored.map((f) => f.id).sort()).toEqual(out.findings.map((f) => f.id).sort());
    });

    it('rollups equal aggregates computed from the raw rows, after a duplicate insert', async () => {
      const s = await make();
      const { batches } = data();
      await s.insert(batches);
      await s.insert(batches.slice(0, 2)); // events and steps again
      const rank = await s.query(
        `SELECT toString(minute) AS m, rank, countMerge(steps) AS steps, round(avgMerge(compute_ms), 3) AS c,
           round(max(compute_max_ms), 3) AS cmax, round(avgMerge(comm_wait_ms), 3) AS w
         FROM rank_minute GROUP BY m, job, rank ORDER BY m, rank`,
      );
      const rawRank = await s.query(
        `SELECT toString(toStartOfMinute(toDateTime(ts, 'UTC'))) AS m, rank, count() AS steps,
           round(avg(compute_ms), 3) AS c, round(max(compute_ms), 3) AS cmax, round(avg(comm_wait_ms), 3) AS w
         FROM steps FINAL GROUP BY m, job, rank ORDER BY m, rank`,
      );
      expect(rank.length).toBeGreaterThan(16);
      expect(rank).toEqual(rawRank);
      const job = await s.query(
        `SELECT toString(minute) AS m, countMerge(rows) AS r, uniqExactMerge(ranks) AS ranks, uniqExactMerge(steps) AS steps,
           min(first_step) AS s0, max(last_step) AS s1, round(avgMerge(step_ms), 3) AS sm
         FROM job_minute GROUP BY m, job ORDER BY m`,
      );
      const rawJob = await s.query(
        `SELECT toString(toStartOfMinute(toDateTime(ts, 'UTC'))) AS m, count() AS r, uniqExact(rank) AS ranks,
           uniqExact(step) AS steps, min(step) AS s0, max(step) AS s1, round(avg(step_ms), 3) AS sm
         FROM steps FINAL GROUP BY m, job ORDER BY m`,
      );
      expect(job).toEqual(rawJob);
      const gpu = await s.query(
        `SELECT toString(minute) AS m, host, gpu, countMerge(samples) AS k, round(avgMerge(sm_clock_mhz), 3) AS clk,
           countIfMerge(throttled_samples) AS thr, max(throttle_reasons) AS bits
         FROM gpu_minute GROUP BY m, host, gpu ORDER BY m, host, gpu`,
      );
      const rawGpu = await s.query(
        `SELECT toString(toStartOfMinute(toDateTime(ts, 'UTC'))) AS m, host, toInt16(gpu) AS gpu, count() AS k,
           round(avg(JSONExtractFloat(raw, 'sm_clock_mhz')), 3) AS clk,
           countIf(bitAnd(JSONExtractUInt(raw, 'throttle_reasons'), 232) != 0) AS thr,
           groupBitOr(JSONExtractUInt(raw, 'throttle_reasons')) AS bits
         FROM events FINAL WHERE kind = 'gpu' GROUP BY m, host, gpu ORDER BY m, host, gpu`,
      );
      expect(gpu.length).toBeGreaterThan(0);
      expect(gpu).toEqual(rawGpu);
    });

    it('round-trips quotes, backslashes and SQL keywords without injection', async () => {
      const s = await make();
      const f: Finding = {
        id: 'straggler-test',
        ts: Date.now(),
        type: 'straggler',
        state: 'open',
        job: NASTY,
        host: NASTY,
        severity: 'warning',
        evidence: { note: NASTY },
        action: 'watch',
        summary: NASTY,
      };
      await s.insert(outputRows({ findings: [f], mfu: [], rollups: [] }));
      const back = await findingsOf(s, NASTY);
      expect(back).toHaveLength(1);
      expect(back[0].summary).toBe(NASTY);
      expect(back[0].evidence.note).toBe(NASTY);
      expect(await findingsOf(s, "' OR 1=1 --")).toEqual([]);
      expect(
        (await findings(s, { host: NASTY, job: NASTY, type: 'straggler' })).map((x) => x.summary),
      ).toEqual([NASTY]);
      expect(await findings(s, { host: "x' OR '1'='1" })).toEqual([]);
      const fault = {
        v: 1,
        kind: 'fault',
        ts: Date.now(),
        host: NASTY,
        job: NASTY,
        source: 'xid',
        code: 79,
        message: NASTY,
      };
      await s.insert(eventRows([fault as RankwatchEvent]));
      const hist = await faultHistory(s, { host: NASTY });
      expect(hist.map((h) => [h.host, h.job, h.message])).toEqual([[NASTY, NASTY, NASTY]]);
      expect(await s.query('SELECT count() AS c FROM findings')).toEqual([{ c: 1 }]);
    });

    it('stores the largest values validation lets through exactly (so no valid event can fail an insert)', async () => {
      const s = await make();
      const edge = {
        v: 1,
        kind: 'step',
        ts: Date.UTC(2100, 0, 1) - 1,
        job: 'edge',
        host: 'h',
        rank: 2 ** 31 - 1,
        gpu: 2 ** 15 - 1,
        stage: 2 ** 15 - 1,
        step: Number.MAX_SAFE_INTEGER,
        step_ms: 1e300,
        compute_ms: 0,
      };
      const v = validateEvent(edge);
      expect(v.ok).toBe(true);
      if (!v.ok) return;
      await s.insert(eventRows([v.event]));
      const q = 'SELECT toUnixTimestamp64Milli(ts) AS ts, rank, gpu, toString(step) AS step FROM';
      const want = { ts: String(edge.ts), rank: edge.rank, gpu: edge.gpu, step: String(edge.step) };
      const norm = (r: Record<string, unknown>) => ({ ...r, ts: String(r.ts) });
      expect((await s.query(`${q} events`)).map(norm)).toEqual([want]);
      expect((await s.query(`${q} steps`)).map(norm)).toEqual([want]);
    });

    it('keeps each event as the line it arrived as, and steps with awkward names and missing fields', async () => {
      const s = await make();
      const ts = Date.now();
      const step = {
        v: 1,
        kind: 'step',
        ts,
        job: NASTY,
        host: `${NASTY} ünï`,
        gpu: 3,
        rank: 7,
        step: 12,
        step_ms: 1234.5,
        compute_ms: 1.5e-3,
      } as RankwatchEvent;
      const line = ` {"v":1,\t"kind":"step", "spaced": "as sent"} `.trim();
      await s.insert(eventRows([step, step], [line, undefined]));
      const raw = await s.query<{ raw: string; job: string; host: string }>(
        'SELECT raw, job, host FROM events ORDER BY length(raw)',
      );
      expect(raw).toEqual([
        { raw: line, job: NASTY, host: `${NASTY} ünï` },
        { raw: JSON.stringify(step), job: NASTY, host: `${NASTY} ünï` },
      ]);
      const steps = await s.query(
        'SELECT job, host, rank, toUInt32(step) AS step, step_ms, compute_ms, comm_wait_ms, tokens FROM steps',
      );
      expect(steps).toEqual([
        {
          job: NASTY,
          host: `${NASTY} ünï`,
          rank: 7,
          step: 12,
          step_ms: 1234.5,
          compute_ms: expect.closeTo(1.5e-3, 6),
          comm_wait_ms: null,
          tokens: 0,
        },
      ]);
    });

    it('answers the reads people run: jobs, MFU, heatmap, findings, nodes, faults, checkpoints', async () => {
      const s = await make();
      const { sim, startTs, events, out, batches } = data();
      const job = sim.opts.job;
      await s.insert(batches);
      const end = events[events.length - 1].ts;

      const js = await jobs(s, { now: end + 1_000, from: startTs - 60_000 });
      expect(js.map((j) => j.job)).toEqual([job]);
      expect(js[0]).toMatchObject({ status: 'finished', ranks: 16, last_step: 119, world_size: 16 });
      expect(js[0].mfu_avg).toBeGreaterThan(0);
      // A finished job stays finished a day later, past the running window (running/stale: their own test).
      const dayLater = await jobs(s, { now: end + 86_400_000 - 120_000, from: startTs - 60_000 });
      expect(dayLater.map((j) => [j.job, j.status])).toEqual([[job, 'finished']]);

      const mfu = await mfuOverTime(s, job, { bucketSeconds: 60 });
      expect(mfu.length).toBeGreaterThanOrEqual(2);
      expect(mfu.reduce((a, b) => a + b.steps, 0)).toBe(out.mfu.length);
      expect(mfu[0].ts % 60_000).toBe(0);

      const heat = await rankHeatmap(s, job, { from: startTs, to: startTs + 120_000 });
      const minutes = new Set(heat.map((c) => c.minute));
      expect(minutes.size).toBe(2);
      expect(heat.length).toBe(2 * 16);
      const slow = heat.filter((c) => c.rank === 3 && c.minute === startTs + 60_000)[0];
      expect(slow.rel_compute).toBeGreaterThan(1.3);
      expect(heat.filter((c) => c.rank !== 3 && c.rank !== 9).every((c) => c.rel_compute < 1.2)).toBe(true);
      expect(await rankHeatmap(s, job, { from: end + 3_600_000 })).toEqual([]);
      const wide = await rankHeatmap(s, job, { bucketMinutes: 5 });
      expect(wide.length).toBe(16 * new Set(wide.map((c) => c.minute)).size);
      expect(wide.every((c) => c.minute % 300_000 === 0)).toBe(true);
      expect(wide.reduce((a, c) => a + c.steps, 0)).toBe(events.filter((e) => e.kind === 'step').length);

      const all = await findings(s, { job });
      expect(new Set(all.map((f) => f.id)).size).toBe(all.length);
      expect(all.length).toBe(new Set(out.findings.map((f) => f.id)).size);
      const stragglers = await findings(s, { job, type: 'straggler' });
      expect(stragglers.length).toBeGreaterThan(0);
      expect(stragglers.every((f) => f.type === 'straggler')).toBe(true);
      const slowHost = stragglers.find((f) => f.rank === 3)?.host;
      expect(slowHost).toBeDefined();
      // Expected incidents worked out from the detector output: each id in its latest state.
      const latest = latestById(out.findings);
      const ids = (fs: Finding[]) => fs.map((f) => f.id).sort();
      const expectIds = (pick: (f: Finding) => boolean) => {
        const want = ids(latest.filter(pick));
        expect(want.length).toBeGreaterThan(0);
        expect(want.length).toBeLessThan(latest.length); // the filter has something to leave out
        return want;
      };
      expect(ids(await findings(s, { host: slowHost }))).toEqual(expectIds((f) => f.host === slowHost));
      const active = await findings(s, { job, state: 'active' });
      expect(ids(active)).toEqual(expectIds((f) => f.job === job && f.state !== 'resolved'));
      // A host with both a resolved and an active incident: both filters apply together.
      const busyHost = out.findings.find((f) => f.type === 'throttle')?.host;
      expect(ids(await findings(s, { host: busyHost, state: 'active' }))).toEqual(
        expectIds((f) => f.host === busyHost && f.state !== 'resolved'),
      );
      expect(latest.some((f) => f.host === busyHost && f.state === 'resolved')).toBe(true);
      expect(ids(await findings(s, { job, state: 'resolved' }))).toEqual(
        expectIds((f) => f.job === job && f.state === 'resolved'),
      );
      expect(await findings(s, { job, from: end + 3_600_000 })).toEqual([]);
      expect((await findings(s, { job, limit: 1 })).length).toBe(1);

      const xid = events.find((e) => e.kind === 'fault') as RankwatchEvent & { host: string };
      const nodes = await nodeHealth(s, { from: startTs - 60_000 });
      const bad = nodes.find((h) => h.host === xid.host);
      expect(bad).toMatchObject({ faults: 1, fault_sources: ['xid'] });
      const throttled = nodes.filter((h) => h.throttled_gpu_minutes > 0);
      expect(throttled.length).toBeGreaterThan(0);
      expect((await nodeHealth(s, { host: xid.host })).map((h) => h.host)).toEqual([xid.host]);

      const hist = await faultHistory(s, { job });
      expect(hist).toHaveLength(1);
      expect(hist[0]).toMatchObject({ host: xid.host, source: 'xid', code: '79' });

      const ck = await checkpointStats(s, { job });
      const saves = events.filter((e) => e.kind === 'checkpoint');
      expect(ck).toEqual([expect.objectContaining({ job, phase: 'save', count: saves.length, failures: 0 })]);
      expect(ck[0].p50_ms).toBeGreaterThan(0);

      // A failed checkpoint and an interruption, then failure counts per cause.
      const extra = [
        {
          v: 1,
          kind: 'checkpoint',
          ts: end + 1,
          job,
          rank: 0,
          step: 120,
          phase: 'save',
          dur_ms: 900,
          ok: false,
        },
        { v: 1, kind: 'job_event', ts: end + 2, job, event: 'interrupted', cause: 'xid' },
      ] as RankwatchEvent[];
      await s.insert(eventRows(extra));
      const causes = await failureCounts(s, { job });
      expect(causes).toEqual(
        expect.arrayContaining([
          { kind: 'fault', cause: 'xid:79', count: 1 },
          { kind: 'interruption', cause: 'xid', count: 1 },
          { kind: 'checkpoint', cause: 'save_failed', count: 1 },
        ]),
      );
      expect((await jobs(s, { now: end + 1_000, from: startTs - 60_000 }))[0].status).toBe('interrupted');
    });

    it('tells running, stale, interrupted and finished jobs apart, running ones first', async () => {
      const s = await make();
      const t0 = Math.floor((Date.now() - 2 * 3_600_000) / 60_000) * 60_000;
      const steps = (job: string, from: number, count: number) =>
        Array.from({ length: count }, (_, i) =>
          [0, 1].map((rank) => ({
            v: 1,
            kind: 'step',
            ts: from + i * 10_000 + rank,
            job,
            host: `h${rank}`,
            gpu: rank,
            rank,
            step: i,
            step_ms: 10_000,
            compute_ms: 9_000,
          })),
        ).flat();
      const lifecycle = (job: string, ts: number, event: string) => ({
        v: 1,
        kind: 'job_event',
        ts,
        job,
        event,
      });
      // live: a config and a start, never an end. restarted: interrupted, then restarted and stepping.
      // cut: interrupted after its steps. done: finished after its steps, in a later minute than the others.
      const evs = [
        { v: 1, kind: 'job', ts: t0, job: 'live', world_size: 2, gpu_model: 'H100-SXM' },
        lifecycle('live', t0, 'start'),
        ...steps('live', t0 + 10_000, 3),
        lifecycle('restarted', t0, 'start'),
        lifecycle('restarted', t0 + 5_000, 'interrupted'),
        lifecycle('restarted', t0 + 6_000, 'restart'),
        ...steps('restarted', t0 + 10_000, 3),
        ...steps('cut', t0 + 10_000, 3),
        lifecycle('cut', t0 + 40_000, 'interrupted'),
        ...steps('done', t0 + 60_000, 2),
        lifecycle('done', t0 + 75_000, 'finished'),
      ] as RankwatchEvent[];
      await s.insert(eventRows(evs));
      const lastStep = t0 + 30_001; // of live, restarted and cut
      const at = async (now: number, activeWithinMs?: number) =>
        (await jobs(s, { now, from: t0 - 60_000, activeWithinMs })).map((j) => [j.job, j.status]);

      // Just after the last step: the unfinished jobs are running and listed first.
      expect(await at(t0 + 80_000)).toEqual([
        ['live', 'running'],
        ['restarted', 'running'],
        ['done', 'finished'],
        ['cut', 'interrupted'],
      ]);
      const [live] = await jobs(s, { now: t0 + 80_000, from: t0 - 60_000 });
      expect(live).toMatchObject({
        job: 'live',
        ranks: 2,
        last_step: 2,
        world_size: 2,
        gpu_model: 'H100-SXM',
      });
      // A job with no MFU figure and no job event reads "none", never an MFU of 0.
      const cut = (await jobs(s, { now: t0 + 80_000, from: t0 - 60_000 })).find((j) => j.job === 'cut');
      expect(cut).toMatchObject({ mfu_last: null, mfu_avg: null, world_size: 0, gpu_model: '' });
      expect(live.last_ts).toBeGreaterThan(lastStep);
      expect(live.last_ts).toBeLessThanOrEqual(lastStep + 60_000);
      // Long after: stale, most recent first; an end event stays what it was.
      expect(await at(t0 + 3_600_000)).toEqual([
        ['done', 'finished'],
        ['cut', 'interrupted'],
        ['live', 'stale'],
        ['restarted', 'stale'],
      ]);
      // The running window, default 5 minutes, is measured from last_ts and set by activeWithinMs.
      const status = async (now: number, activeWithinMs?: number) =>
        Object.fromEntries(await at(now, activeWithinMs)).live;
      expect(await status(live.last_ts + 300_000)).toBe('running');
      expect(await status(live.last_ts + 300_001)).toBe('stale');
      expect(await status(live.last_ts + 360_000, 600_000)).toBe('running');
      expect(await status(live.last_ts + 60_001, 60_000)).toBe('stale');
    });

    it("keeps each job's latest slowest-GPUs ranking, and ranks the fleet's GPUs by the GPU-hours they cost", async () => {
      const s = await make();
      const { sim, out, batches } = data();
      const job = sim.opts.job;
      // Inserted twice (a redelivery): one copy.
      await s.insert(batches);
      await s.insert(outputRows(out));
      const rankings = out.slowGpus ?? [];
      const last = Math.max(...rankings.map((r) => r.ts));
      const latest = rankings.filter((r) => r.ts === last);
      expect(latest.length).toBeGreaterThan(0);
      const mine = await jobSlowGpus(s, job);
      expect(mine.map((r) => r.rank).sort((a, b) => a - b)).toEqual(
        latest.map((r) => r.rank).sort((a, b) => a - b),
      );
      // The slow rank 3 (50% slower from step 5) is what the job waits for: first, with its cost.
      expect(mine[0]).toMatchObject({ rank: 3, host: sim.places[3].host, gpu: sim.places[3].gpu, ts: last });
      expect(mine[0].cost_pct).toBeGreaterThan(5);
      expect(mine[0]).toEqual(latest.find((r) => r.rank === 3));

      // Two more jobs, one of them named to break SQL: a GPU ranked in both counts two jobs and
      // shows its latest figures; a bigger job's cost weighs more in GPU-hours.
      const row = (over: Partial<SlowGpu>): SlowGpu => ({
        job: NASTY,
        ts: last + 60_000,
        step: 100,
        rank: 0,
        host: 'gpu-0900',
        gpu: 1,
        stage: 0,
        slowdown_pct: 4,
        cost_pct: 1,
        gpu_hours_per_day: 1,
        steps: 96,
        ...over,
      });
      await s.insert(
        outputRows({
          findings: [],
          mfu: [],
          rollups: [],
          slowGpus: [
            row({ ts: last + 1_000, slowdown_pct: 9, cost_pct: 9, gpu_hours_per_day: 99 }), // superseded
            row({ host: 'gpu-0900', gpu: 1, slowdown_pct: 6, cost_pct: 2, gpu_hours_per_day: 480 }),
            row({ rank: 1, host: 'gpu-0900', gpu: 2, slowdown_pct: 7, cost_pct: 0, gpu_hours_per_day: 0 }),
            row({ job: 'j-old', ts: last - 60_000, host: 'gpu-0900', gpu: 1, slowdown_pct: 5.5 }),
          ],
        }),
      );
      const nasty = await jobSlowGpus(s, NASTY);
      expect(nasty.map((r) => [r.host, r.gpu, r.cost_pct])).toEqual([
        ['gpu-0900', 1, 2],
        ['gpu-0900', 2, 0],
      ]);
      const fleet = await fleetSlowGpus(s, { from: last - 3_600_000, to: last + 3_600_000 });
      expect(fleet[0]).toMatchObject({ host: 'gpu-0900', gpu: 1, job: NASTY, slowdown_pct: 6, jobs: 2 });
      // GPU-hours first (480 a day beats the small job's), then slowdown among those costing nothing.
      for (let i = 1; i < fleet.length; i++) {
        const [a, b] = [fleet[i - 1], fleet[i]];
        expect(
          a.gpu_hours_per_day > b.gpu_hours_per_day ||
            (Math.abs(a.gpu_hours_per_day - b.gpu_hours_per_day) < 0.1 && a.slowdown_pct >= b.slowdown_pct),
        ).toBe(true);
      }
      expect(fleet.filter((r) => r.host === 'gpu-0900' && r.gpu === 2)).toHaveLength(1);
      expect(await jobSlowGpus(s, 'no-such-job')).toEqual([]);
      expect(await fleetSlowGpus(s, { from: last + 7_200_000 })).toEqual([]);
    });

    it('keeps the latest state of an incident', async () => {
      const s = await make();
      const base: Finding = {
        id: 'throttle-1',
        ts: 1_700_000_000_000,
        type: 'throttle',
        state: 'open',
        job: 'j',
        host: 'h1',
        severity: 'warning',
        evidence: {},
        action: 'watch',
        summary: 'open',
      };
      const later = { ...base, ts: base.ts + 60_000, state: 'resolved' as const, summary: 'resolved' };
      await s.insert([{ table: 'findings', rows: [findingRow(base), findingRow(later)] }]);
      expect((await findings(s, { job: 'j' })).map((f) => f.summary)).toEqual(['resolved']);
      expect(await findings(s, { job: 'j', state: 'active' })).toEqual([]);
      expect((await findings(s, { job: 'j', state: 'resolved' })).length).toBe(1);
    });

    it('counts a checkpoint save once, not once per rank: the slowest rank is its duration', async () => {
      const s = await make();
      const t0 = Date.UTC(2026, 5, 1, 12);
      // Every rank sends its own event for a save (the Python hook runs on each rank).
      const ckpt = (rank: number, start: number, step: number, phase: string, dur: number, ok = true) => ({
        v: 1,
        kind: 'checkpoint',
        ts: start + dur,
        job: 'ck',
        rank,
        step,
        phase,
        dur_ms: dur,
        bytes: 1e9,
        ok,
      });
      const ranks = [0, 1, 2, 3];
      const events = [
        // Step 100 saved by 4 ranks; rank 3 is slow, and host clocks differ by a few hundred ms.
        ...ranks.map((r) => ckpt(r, t0 + r * 150, 100, 'save', r === 3 ? 30_000 : 10_000 + r)),
        // The same save delivered twice (at-least-once): still one save of 4 ranks.
        ckpt(1, t0 + 150, 100, 'save', 10_001),
        // Two restarts load the step-100 checkpoint: two loads, 10 minutes apart.
        ...ranks.map((r) => ckpt(r, t0 + 600_000, 100, 'load', 5_000 + r)),
        ...ranks.map((r) => ckpt(r, t0 + 1_200_000, 100, 'load', 6_000 + r)),
        // Step 200: rank 2 fails, the save failed once (not a failure per rank).
        ...ranks.map((r) => ckpt(r, t0 + 1_800_000, 200, 'save', 12_000, r !== 2)),
        // Another job's save at the same step stays its own.
        { ...ckpt(0, t0, 100, 'save', 4_000), job: 'other' },
      ] as RankwatchEvent[];
      await s.insert(eventRows(events));

      const saves = await checkpointSaves(s, { job: 'ck' });
      expect(saves.map((x) => [x.phase, x.step, x.ranks, x.dur_ms, x.ok])).toEqual([
        ['save', 100, 4, 30_000, true],
        ['load', 100, 4, 5_003, true],
        ['load', 100, 4, 6_003, true],
        ['save', 200, 4, 12_000, false],
      ]);
      expect(saves[0].ts).toBe(t0 + 3 * 150 + 30_000);
      const stats = await checkpointStats(s, { job: 'ck' });
      expect(stats.map((x) => [x.phase, x.count, x.failures, x.max_ms, x.mean_ok_ms, x.ranks_max])).toEqual([
        ['load', 2, 0, 6_003, 5_503, 4],
        ['save', 2, 1, 30_000, 30_000, 4],
      ]);
      const causes = await failureCounts(s, { job: 'ck' });
      expect(causes).toEqual([{ kind: 'checkpoint', cause: 'save_failed', count: 1 }]);
      expect((await checkpointSaves(s, { job: 'other' })).map((x) => x.ranks)).toEqual([1]);
      // A time range that holds only the second load.
      const mid = await checkpointSaves(s, { job: 'ck', from: t0 + 1_000_000, to: t0 + 1_500_000 });
      expect(mid.map((x) => [x.phase, x.dur_ms])).toEqual([['load', 6_003]]);
    });
  });
}

const STATE_ORDER = ['open', 'update', 'resolved'];
/** Each incident in its latest state: latest by ts, and at equal ts resolved > update > open. */
function latestById(all: Finding[]): Finding[] {
  const byId = new Map<string, Finding>();
  for (const f of all) {
    const cur = byId.get(f.id);
    if (
      !cur ||
      f.ts > cur.ts ||
      (f.ts === cur.ts && STATE_ORDER.indexOf(f.state) > STATE_ORDER.indexOf(cur.state))
    )
      byId.set(f.id, f);
  }
  return [...byId.values()];
}

async function rollupTotals(s: Store) {
  const [r] = await s.query<Record<string, string>>(
    `SELECT (SELECT countMerge(steps) FROM rank_minute) AS rank_steps,
       (SELECT countMerge(rows) FROM job_minute) AS job_rows,
       (SELECT countMerge(samples) FROM gpu_minute) AS gpu_samples`,
  );
  return { rank_steps: n(r.rank_steps), job_rows: n(r.job_rows), gpu_samples: n(r.gpu_samples) };
}
