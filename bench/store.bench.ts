/**
 * Store: insert throughput of each driver and latency of the heatmap and findings queries on a
 * 4096-rank, 1-hour job, each next to its naive alternative in the same run:
 * - inserts: rows/s through the drivers' JSONEachRow path vs string-built `INSERT … VALUES`, on
 *   the same rows (best of 3), and the drivers' path over the whole hour;
 * - queries: the heatmap from the rank_minute rollup vs the same figures aggregated from raw steps.
 * The server driver talks HTTP to tests/fixtures/chdb-http-server.ts in a child process (the same
 * engine as chDB; no ClickHouse server here), so its figures include HTTP and a second process,
 * not a server's own speed. The job is synthetic rows (not the simulator) so that setup stays short:
 * one step every 10 s, 360 steps, 1,474,560 step rows, 245,760 heatmap cells.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Finding } from '../schema/finding.js';
import { ChdbStore } from '../store/chdb.js';
import { ClickHouseStore } from '../store/clickhouse.js';
import { findings, rankHeatmap, rankHeatmapQuery } from '../store/queries.js';
import { findingRow, type InsertBatch } from '../store/rows.js';
import type { Store } from '../store/store.js';
import { type Measurement, measureAsync, type Section } from './harness.js';

const RANKS = 4096;
const STEP_MS = 10_000;
const STEPS = 360; // one hour
const BATCH_STEPS = 4; // 16,384 rows per insert, about what the pipeline sends per batch at this scale
// Recent, so raw rows are inside the TTL: rows older than it are dropped on insert.
const T0 = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3 * 3_600_000;

interface StepRow {
  ts: number;
  job: string;
  step: number;
  rank: number;
  host: string;
  gpu: number;
  stage: number;
  step_ms: number;
  compute_ms: number;
  comm_wait_ms: number;
  tokens: number;
}

function stepRows(job: string, fromStep: number, toStep: number): StepRow[] {
  const out: StepRow[] = [];
  for (let step = fromStep; step < toStep; step++) {
    for (let rank = 0; rank < RANKS; rank++) {
      // Deterministic spread; rank 1234 is slow, so the heatmap has something to show.
      const compute = 1000 + ((rank * 7919 + step * 104729) % 97) + (rank === 1234 ? 250 : 0);
      out.push({
        ts: T0 + step * STEP_MS + (rank % 50),
        job,
        step,
        rank,
        host: `gpu-${String(rank >> 3).padStart(4, '0')}`,
        gpu: rank & 7,
        stage: rank >> 10,
        step_ms: 1400,
        compute_ms: compute,
        comm_wait_ms: 1400 - compute,
        tokens: 0,
      });
    }
  }
  return out;
}

const json = (rows: StepRow[]): InsertBatch[] => [
  { table: 'steps', rows: rows.map((r) => JSON.stringify(r)) },
];

/** The naive path: values spliced into SQL text (and the injection risk that comes with it). */
function valuesSql(rows: StepRow[]): string {
  const q = (s: string) => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  const tuples = rows.map(
    (r) =>
      `(fromUnixTimestamp64Milli(${r.ts}), ${q(r.job)}, ${r.step}, ${r.rank}, ${q(r.host)}, ${r.gpu}, ${r.stage}, ${r.step_ms}, ${r.compute_ms}, ${r.comm_wait_ms}, ${r.tokens})`,
  );
  return `INSERT INTO steps (ts, job, step, rank, host, gpu, stage, step_ms, compute_ms, comm_wait_ms, tokens) VALUES ${tuples.join(',')}`;
}

function findingRows(job: string): InsertBatch[] {
  const rows: string[] = [];
  const types = ['straggler', 'throttle', 'slow_link', 'xid'];
  for (let i = 0; i < 2_000; i++) {
    const base: Finding = {
      id: `f-${i}`,
      ts: T0 + (i % 3600) * 1000,
      type: types[i % types.length],
      state: 'open',
      job,
      host: `gpu-${String(i % 512).padStart(4, '0')}`,
      rank: i % RANKS,
      severity: 'warning',
      evidence: { z: i },
      action: 'watch',
      summary: `finding ${i}`,
    };
    rows.push(findingRow(base), findingRow({ ...base, ts: base.ts + 60_000, state: 'update' }));
    if (i % 3 === 0) rows.push(findingRow({ ...base, ts: base.ts + 120_000, state: 'resolved' }));
  }
  return [{ table: 'findings', rows }];
}

async function timed(
  name: string,
  items: number,
  unit: string,
  fn: () => Promise<void>,
): Promise<Measurement> {
  const t = performance.now();
  await fn();
  return { name, items, unit, bestMs: performance.now() - t };
}

/** Inserts the whole job in pipeline-sized batches: every run writes new rows, so nothing is deduplicated away. */
async function insertJob(store: Store, job: string, steps = STEPS): Promise<void> {
  for (let s = 0; s < steps; s += BATCH_STEPS) await store.insert(json(stepRows(job, s, s + BATCH_STEPS)));
}

async function naiveInsert(store: Store, job: string, steps: number): Promise<void> {
  for (let s = 0; s < steps; s += BATCH_STEPS) await store.exec(valuesSql(stepRows(job, s, s + BATCH_STEPS)));
}

async function startFixture(path: string): Promise<{ url: string; child: ChildProcess }> {
  // bench/ under tsx, dist/bench/ when built: the repository root holds package.json.
  const root = join(
    import.meta.dirname,
    existsSync(join(import.meta.dirname, '..', 'package.json')) ? '..' : '../..',
  );
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', join(root, 'tests/fixtures/chdb-http-server.ts'), '--path', path],
    {
      cwd: root,
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  for await (const line of lines) {
    const m = /^listening (\S+)/.exec(line);
    if (m) return { url: m[1], child };
  }
  throw new Error('the chDB HTTP fixture did not start');
}

async function queries(store: Store, job: string, label: string): Promise<Measurement[]> {
  const range = { from: T0, to: T0 + 3_600_000 };
  const cells = (await rankHeatmap(store, job, range)).length;
  const heat = await measureAsync(
    `${label}: heatmap from rollup (${cells.toLocaleString('en-US')} cells)`,
    1,
    'queries',
    async () => {
      await rankHeatmap(store, job, range);
    },
  );
  const active = (await findings(store, { job, state: 'active', limit: 10_000 })).length;
  const find = await measureAsync(
    `${label}: active findings (${active} of 2,000 incidents)`,
    1,
    'queries',
    async () => {
      await findings(store, { job, state: 'active', limit: 10_000 });
    },
  );
  const five = (await rankHeatmap(store, job, { ...range, bucketMinutes: 5 })).length;
  const heat5 = await measureAsync(
    `${label}: heatmap, 5-minute cells (${five.toLocaleString('en-US')} cells)`,
    1,
    'queries',
    async () => {
      await rankHeatmap(store, job, { ...range, bucketMinutes: 5 });
    },
  );
  return [heat, heat5, find];
}

/** The heatmap's figures (same columns as rankHeatmap) computed from the raw rows. */
const rawHeatmapSql = `SELECT toUnixTimestamp64Milli(toDateTime64(cell, 3)) AS minute_ms, rank, host, gpu, stage, steps,
    c, cmax, w, c / median(c) OVER (PARTITION BY cell, stage) AS rel_compute
  FROM (
    SELECT toStartOfMinute(toDateTime(ts, 'UTC')) AS cell, rank, any(host) AS host, any(gpu) AS gpu,
      any(stage) AS stage, count() AS steps, avg(compute_ms) AS c, max(compute_ms) AS cmax, avg(comm_wait_ms) AS w
    FROM steps FINAL WHERE job = {job:String} GROUP BY cell, rank
  ) ORDER BY minute_ms, rank`;

export async function storeInsertBench(): Promise<Section> {
  return (await run()).insert;
}

export async function storeQueryBench(): Promise<Section> {
  return (await run()).query;
}

let result: Promise<{ insert: Section; query: Section }> | undefined;
/** Both sections come from one setup (one chDB folder per process, one fixture). */
function run() {
  result ??= runOnce();
  return result;
}

async function runOnce(): Promise<{ insert: Section; query: Section }> {
  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-bench-store-'));
  const chdb = new ChdbStore({ path: join(dir, 'chdb') });
  const fx = await startFixture(join(dir, 'server'));
  const server = new ClickHouseStore({ url: fx.url, database: 'bench' });
  const rows = RANKS * STEPS;
  const naiveSteps = 16;
  try {
    await chdb.migrate();
    await server.migrate();
    // Warm-up of every path: first inserts create parts, compile the VALUES template, load code.
    for (const st of [chdb, server]) {
      await st.insert(json(stepRows('warmup', 0, 1)));
      await naiveInsert(st, 'warmup-naive', 1);
    }

    // The naive path and the driver's own on equal slices (65,536 rows, fresh jobs), alternating,
    // best of 3: the same conditions for both, so the ratio is not the table's growth.
    const sameRows = RANKS * naiveSteps;
    const bestOf3 = async (name: string, fn: (round: number) => Promise<void>): Promise<Measurement> => {
      let best: Measurement | undefined;
      for (let round = 0; round < 3; round++) {
        const m = await timed(name, sameRows, 'rows', () => fn(round));
        if (!best || m.bestMs < best.bestMs) best = m;
      }
      return best!;
    };
    const pair = async (st: Store, label: string, via: string) => {
      const naive = await bestOf3(`${label}: string-built VALUES`, (r) =>
        naiveInsert(st, `naive-${r}`, naiveSteps),
      );
      const same = await bestOf3(`${label}: JSONEachRow (${via}), same rows`, (r) =>
        insertJob(st, `same-${r}`, naiveSteps),
      );
      return [naive, same];
    };
    const [naiveChdb, chdbSame] = await pair(chdb, 'chdb', 'ChdbStore.insert');
    const [naiveServer, serverSame] = await pair(server, 'clickhouse driver', 'ClickHouseStore.insert');
    // Throughput over the whole hour, as a dashboard's job grows (merges running meanwhile).
    const chdbJson = await timed('chdb: JSONEachRow, the whole hour', rows, 'rows', () =>
      insertJob(chdb, 'job-4096'),
    );
    const serverJson = await timed(
      'clickhouse driver: JSONEachRow over HTTP, the whole hour',
      rows,
      'rows',
      () => insertJob(server, 'job-4096'),
    );
    await chdb.insert(findingRows('job-4096'));
    await server.insert(findingRows('job-4096'));

    const rawCells = (await chdb.query(rawHeatmapSql, { job: 'job-4096' })).length;
    const raw = await measureAsync(
      `chdb: heatmap aggregated from raw steps (${rawCells.toLocaleString('en-US')} cells)`,
      1,
      'queries',
      async () => {
        await chdb.query(rawHeatmapSql, { job: 'job-4096' });
      },
    );
    // The same two heatmaps with the 245,760 cells summed in the engine: what the engine costs
    // without shipping and parsing the cells (which dominate the figures above).
    const rollupQ = rankHeatmapQuery('job-4096', { from: T0, to: T0 + 3_600_000 });
    const engineRaw = await measureAsync(
      'chdb, engine only: heatmap from raw steps',
      1,
      'queries',
      async () => {
        await chdb.query(`SELECT count(), sum(rel_compute) FROM (${rawHeatmapSql})`, { job: 'job-4096' });
      },
    );
    const engineRollup = await measureAsync(
      'chdb, engine only: heatmap from rollup',
      1,
      'queries',
      async () => {
        await chdb.query(`SELECT count(), sum(rel_compute) FROM (${rollupQ.sql})`, rollupQ.params);
      },
    );
    const q = [
      ...(await queries(chdb, 'job-4096', 'chdb')),
      engineRaw,
      engineRollup,
      ...(await queries(server, 'job-4096', 'clickhouse driver')),
    ];
    const ms = (m: Measurement) => `${m.name}: ${m.bestMs.toFixed(1)} ms`;
    return {
      insert: {
        title: 'Store inserts: 4096 ranks, 1 hour of steps',
        what: `${rows.toLocaleString('en-US')} step rows (4096 ranks, a step every 10 s for an hour: scaled down from ~1 s steps to keep the run short; synthetic rows) inserted in batches of ${(RANKS * BATCH_STEPS).toLocaleString('en-US')}, with the per-minute rollup views running. The naive path splices values into SQL; it and the driver's own path are timed on the same ${sameRows.toLocaleString('en-US')} rows (best of 3, alternating), then the driver's path over the whole hour. The server driver talks HTTP to the chDB test fixture in a second process.`,
        baseline: naiveChdb,
        rows: [chdbSame, chdbJson, naiveServer, serverSame, serverJson],
      },
      query: {
        title: 'Store queries: 4096 ranks, 1 hour',
        what: 'Latency of the reads dashboards run most, best of 3, on the job above; baseline: the heatmap figures aggregated from raw steps instead of read from the rank_minute rollup.',
        baseline: raw,
        rows: q,
        notes: [
          ms(raw),
          ...q.map(ms),
          `At a step every 10 s a heatmap cell aggregates 6 raw rows; at ~1 s steps it would aggregate 60, and the raw query grows with that while the rollup read does not. Full one-minute heatmaps are dominated by moving and parsing 245,760 cells: ask for wider cells (bucketMinutes) over long ranges.`,
        ],
      },
    };
  } finally {
    await server.close();
    await chdb.close();
    const exited = new Promise((r) => fx.child.once('exit', r));
    if (fx.child.exitCode === null && fx.child.kill('SIGTERM')) await exited;
    rmSync(dir, { recursive: true, force: true });
  }
}
