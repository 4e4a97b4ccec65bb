/**
 * The generated dashboard is current, and every panel's SQL runs on the real schema (chDB) with
 * Grafana's macros filled in the way the ClickHouse plugin fills them.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DetectorRunner } from '../detectors/runner.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { ChdbStore } from '../store/chdb.js';
import { eventRows, outputRows } from '../store/rows.js';
import { buildDashboard, DASHBOARD_FILE, PANELS } from './build.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-dash-'));
const store = new ChdbStore({ path: dir });
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

/** What the plugin sends for the last 6 hours, job "j". */
function expand(sql: string): string {
  return sql
    .replace(
      /\$__timeFilter\((\w+)\)/g,
      "$1 >= toDateTime(now() - 21600, 'UTC') AND $1 <= toDateTime(now(), 'UTC')",
    )
    .replace(/\$__timeInterval\((\w+)\)/g, 'toStartOfInterval(toDateTime($1), INTERVAL 60 second)')
    .replace(/\$\{job:singlequote\}/g, "'j'");
}

describe('grafana dashboard', () => {
  it('is current: run `npx tsx dashboards/build.ts` after changing dashboards/build.ts', () => {
    // Compared as data: `biome format` may lay the file out differently from JSON.stringify.
    expect(JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8'))).toEqual(buildDashboard());
  });

  it('runs every panel query on the schema', async () => {
    await store.migrate();
    const sim = new ClusterSim({
      job: 'j',
      ranks: 16,
      steps: 60,
      startTs: Date.now() - 3_600_000,
      collectives: false,
      faults: [parseFault('throttle:rank=3,at=5'), parseFault('xid:rank=7,at=20')],
    });
    const events = [...sim.events()];
    const runner = new DetectorRunner();
    for (const e of events) runner.push(e);
    runner.flush();
    await store.insert([...eventRows(events), ...outputRows(runner.take())]);
    for (const [name, sql] of Object.entries(PANELS)) {
      const rows = await store.query(expand(sql)).catch((e: Error) => {
        throw new Error(`panel ${name}: ${e.message}`);
      });
      expect(rows.length, `panel ${name} returns rows`).toBeGreaterThan(0);
    }
  });
});
