/**
 * The raw-events bench's measurement, in a process of its own (chDB opens one data folder per
 * process): simulated events inserted into chDB as `detect` writes them, in 32,768-event batches,
 * into tables that each add one part of the cost. Variants run in turn, best of three each;
 * tables are emptied before each run and every insert has a token of its own (no deduplication).
 * Prints `{ events, rows: [{ name, ms, cpuUs }] }` as JSON.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RankwatchEvent } from '../schema/events.js';
import { ClusterSim } from '../sim/cluster.js';
import { ChdbStore } from '../store/chdb.js';
import { EVENT_COLUMNS, eventRows, type InsertBatch } from '../store/rows.js';

const BATCH = 32_768; // the most events `detect` merges into one delivery (one insert)
const startTs = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000; // inside the raw TTL
const events: RankwatchEvent[] = [...new ClusterSim({ ranks: 256, steps: 120, startTs }).events()];
const lines = events.map((e) => JSON.stringify(e));

/** Where the raw rows go in each variant (undefined: not written, as with `detect --no-events`). */
const VARIANTS: [name: string, table: string | undefined][] = [
  ['steps and their rollups only (`--no-events`)', undefined],
  ['+ raw events into a Null table (the engine reads them, stores nothing)', 'raw_null'],
  ['+ raw events into a MergeTree without a sort key', 'raw_plain'],
  ['+ raw events into a copy of `events` (its sort key and deduplication, no views)', 'raw_noviews'],
  ['+ raw events into `events` with its views (gpu_minute, faults, checkpoints, job lifecycle)', 'events'],
];

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-bench-raw-'));
const store = new ChdbStore({ path: join(dir, 'chdb') });
try {
  await store.migrate();
  // Copies of the events table's columns, so the variants cannot drift from the schema.
  await store.exec('CREATE TABLE raw_null AS events ENGINE = Null');
  await store.exec('CREATE TABLE raw_plain AS events ENGINE = MergeTree ORDER BY tuple()');
  await store.exec('CREATE TABLE raw_noviews AS events');
  const emptied = ['events', 'steps', 'job_minute', 'rank_minute', 'gpu_minute', 'faults', 'checkpoints'];
  let run = 0;
  const once = async (table: string | undefined) => {
    for (const t of [...emptied, 'raw_plain', 'raw_noviews']) await store.exec(`TRUNCATE TABLE ${t}`);
    run++;
    const cpu = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < events.length; i += BATCH) {
      const [raw, steps] = eventRows(events.slice(i, i + BATCH), lines.slice(i, i + BATCH));
      const batches: InsertBatch[] = [{ ...steps, token: `steps-${run}-${i}` }];
      if (table) batches.push({ ...raw, table, columns: EVENT_COLUMNS, token: `raw-${run}-${i}` });
      await store.insert(batches);
    }
    const ms = performance.now() - t0;
    const used = process.cpuUsage(cpu);
    return { ms, cpuUs: used.user + used.system };
  };
  const best = VARIANTS.map(() => ({ ms: Number.POSITIVE_INFINITY, cpuUs: Number.POSITIVE_INFINITY }));
  for (const [, table] of VARIANTS) await once(table); // warm-up: code, first parts
  for (let round = 0; round < 3; round++)
    for (const [k, [, table]] of VARIANTS.entries()) {
      const r = await once(table);
      best[k] = { ms: Math.min(best[k].ms, r.ms), cpuUs: Math.min(best[k].cpuUs, r.cpuUs) };
    }
  const rows = VARIANTS.map(([name], k) => ({ name, ...best[k] }));
  process.stdout.write(`${JSON.stringify({ events: events.length, rows })}\n`);
} finally {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}
