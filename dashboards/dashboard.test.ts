/**
 * The generated dashboards are current, and every panel's SQL (and every template variable's and
 * annotation's) runs on a simulated job in chDB with Grafana's variables and the ClickHouse
 * plugin's macros expanded as they are in Grafana (macros.ts), returning the columns and types
 * the panel expects: a time column first for time series, numbers where numbers are drawn.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DetectorRunner } from '../detectors/runner.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { ChdbStore } from '../store/chdb.js';
import { eventRows, outputRows } from '../store/rows.js';
import { buildDashboard, DASHBOARDS, dashboardFile } from './build.js';
import { DATASOURCE } from './clickhouse.js';
import { type Expansion, expand } from './macros.js';
import { ANNOTATIONS, type Col, type DashboardKey, PANELS, VARIABLES } from './panels.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-dash-'));
const store = new ChdbStore({ path: dir });
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const TYPE: Record<Col, RegExp> = {
  time: /^(Nullable\()?DateTime(64)?\b/,
  number: /^(Nullable\()?(U?Int\d+|Float\d+|Decimal)/,
  string: /^(Nullable\(|LowCardinality\()*String\b/,
};

describe('grafana dashboards', () => {
  it.each(Object.keys(DASHBOARDS) as DashboardKey[])(
    '%s is current: run `npx tsx dashboards/build.ts` after changing dashboards/',
    (key) => {
      // Compared as data: `biome format` may lay the file out differently from JSON.stringify.
      expect(JSON.parse(readFileSync(dashboardFile(key), 'utf8'))).toEqual(
        JSON.parse(JSON.stringify(buildDashboard(key))),
      );
    },
  );

  it('provisions the plugin the panels query and a provider for the generated files', () => {
    const root = join(import.meta.dirname, '..', 'deploy', 'grafana', 'provisioning');
    const ds = readFileSync(join(root, 'datasources', 'rankwatch-clickhouse.yaml'), 'utf8');
    expect(ds).toMatch(new RegExp(`type: ${DATASOURCE.type}\\n`));
    const provider = readFileSync(join(root, 'dashboards', 'rankwatch.yaml'), 'utf8');
    expect(provider).toMatch(/type: file\n/);
    expect(provider).toMatch(/path: \/var\/lib\/grafana\/dashboards\/rankwatch\n/);
  });

  it('puts every panel on its dashboard, with the ClickHouse query the plugin reads', () => {
    for (const p of PANELS) {
      const d = buildDashboard(p.dashboard);
      const panel = d.panels?.find((x) => 'title' in x && x.title === p.title) as
        | { targets?: { rawSql?: string; format?: number }[] }
        | undefined;
      expect(panel?.targets?.[0]?.rawSql, p.key).toBe(p.sql);
      expect(panel?.targets?.[0]?.format, p.key).toBe(p.kind === 'table' || p.kind === 'stat' ? 1 : 0);
    }
  });

  describe('on a simulated job in chDB', () => {
    const start = Date.now() - 3_600_000;
    let ctx: Expansion;
    beforeAll(async () => {
      await store.migrate();
      const sim = new ClusterSim({
        job: 'j',
        ranks: 16,
        steps: 130,
        startTs: start,
        faults: ['throttle:rank=3,at=5', 'nic:rank=12,at=20,factor=4', 'xid:rank=7,at=100'].map(parseFault),
      });
      const events = [...sim.events()];
      const runner = new DetectorRunner();
      for (const e of events) runner.push(e);
      runner.flush();
      await store.insert([...eventRows(events), ...outputRows(runner.take())]);
      ctx = { from: start - 600_000, to: Date.now(), intervalSeconds: 60, vars: {} };
      // The variables as Grafana fills them: job from its query, host = All = every value of its query.
      const jobs = await store.query<{ job: string }>(expand(VARIABLES.job, ctx));
      ctx.vars.job = [jobs[0]?.job ?? ''];
      const hosts = await store.query<{ host: string }>(expand(VARIABLES.host, ctx));
      ctx.vars.host = hosts.map((h) => h.host);
    }, 120_000);

    it('fills the job and host variables', () => {
      expect(ctx.vars.job).toEqual(['j']);
      expect(ctx.vars.host).toEqual(['gpu-0000', 'gpu-0001']);
    });

    it.each(PANELS.map((p) => [`${p.dashboard}/${p.key}`, p] as const))(
      'panel %s returns its columns',
      async (_name, p) => {
        const sql = expand(p.sql, ctx);
        const cols = await store.query<{ name: string; type: string }>(`DESCRIBE TABLE (${sql})`);
        const types = Object.fromEntries(cols.map((c) => [c.name, c.type]));
        for (const [name, want] of Object.entries(p.columns))
          expect(types[name], `${p.key}.${name}: ${types[name]}`).toMatch(TYPE[want]);
        if (p.kind === 'timeseries' || p.kind === 'heatmap') expect(cols[0].name).toBe('time');
        const rows = await store.query<Record<string, unknown>>(sql);
        if (!p.mayBeEmpty) expect(rows.length, `${p.key} returns rows`).toBeGreaterThan(0);
        if (p.kind === 'stat')
          expect(Object.values(rows[0] ?? {})[0], `${p.key} has a figure`).not.toBeNull();
      },
    );

    it('the heatmap puts the throttled rank on top and the slow-link panels name the NIC host', async () => {
      const slowest = await store.query<{ rank: number; host: string }>(
        expand(PANELS.find((p) => p.key === 'slowest')?.sql ?? '', ctx),
      );
      expect(Number(slowest[0].rank)).toBe(3);
      const links = await store.query<{ host: string; type: string }>(
        expand(PANELS.find((p) => p.key === 'slow_links')?.sql ?? '', ctx),
      );
      expect(links.map((l) => l.host)).toContain('gpu-0001');
    });

    it.each(Object.entries(ANNOTATIONS))('annotation %s returns time and text', async (_name, sql) => {
      const cols = await store.query<{ name: string; type: string }>(`DESCRIBE TABLE (${expand(sql, ctx)})`);
      expect(cols.map((c) => c.name)).toEqual(['time', 'text']);
      expect(cols[0].type).toMatch(TYPE.time);
    });
  });
});
