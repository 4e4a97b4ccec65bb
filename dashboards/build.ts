/**
 * The Grafana dashboards as code, with Grafana's typed builders (@grafana/grafana-foundation-sdk):
 * `npx tsx dashboards/build.ts` writes dashboards/json/*.json, one per dashboard (job overview,
 * rank heatmap, links, fleet health, failures and checkpoints), for Grafana ≥ 10 with the
 * grafana-clickhouse-datasource plugin (≥ 4). deploy/grafana/ provisions the data source and
 * these files. dashboards/dashboard.test.ts fails when the JSON is stale and runs every panel's
 * SQL on a simulated job in chDB, macros expanded as the plugin expands them.
 *
 * Grafana, not rankwatch, fills `${job:singlequote}` into the SQL: give the data source a read-only
 * ClickHouse user (see docs/clickhouse.md), as the plugin's documentation asks.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as common from '@grafana/grafana-foundation-sdk/common';
import * as dashboard from '@grafana/grafana-foundation-sdk/dashboard';
import * as heatmap from '@grafana/grafana-foundation-sdk/heatmap';
import * as stat from '@grafana/grafana-foundation-sdk/stat';
import * as table from '@grafana/grafana-foundation-sdk/table';
import * as timeseries from '@grafana/grafana-foundation-sdk/timeseries';
import { ClickHouseQueryBuilder, DATASOURCE } from './clickhouse.js';
import { ANNOTATIONS, type DashboardKey, PANELS, type PanelSpec, VARIABLES } from './panels.js';

export const DASHBOARDS: Record<
  DashboardKey,
  { uid: string; title: string; description: string; host: boolean }
> = {
  job: {
    uid: 'rankwatch-job',
    title: 'rankwatch: job overview',
    description:
      'MFU, tokens/s, step time and findings of one job; checkpoint saves and interruptions annotated.',
    host: false,
  },
  ranks: {
    uid: 'rankwatch-ranks',
    title: 'rankwatch: rank heatmap',
    description: 'Per-rank compute against its pipeline-stage peers: a straggler is a hot row.',
    host: true,
  },
  links: {
    uid: 'rankwatch-links',
    title: 'rankwatch: links',
    description: 'Bus bandwidth by collective and host, and the slow links found.',
    host: true,
  },
  fleet: {
    uid: 'rankwatch-fleet',
    title: 'rankwatch: fleet health',
    description: 'Node health, throttled GPUs and the cordon list.',
    host: true,
  },
  failures: {
    uid: 'rankwatch-failures',
    title: 'rankwatch: failures and checkpoints',
    description:
      'Faults by source, the failure rate, checkpoint durations and interval advice, interruptions.',
    host: true,
  },
};

function panel(
  p: PanelSpec,
):
  | dashboard.PanelBuilder
  | timeseries.PanelBuilder
  | table.PanelBuilder
  | heatmap.PanelBuilder
  | stat.PanelBuilder {
  const target = new ClickHouseQueryBuilder(
    p.sql,
    p.kind === 'timeseries' || p.kind === 'heatmap' ? 'timeseries' : 'table',
  );
  const base = <
    T extends {
      title(t: string): T;
      description(d: string): T;
      datasource(d: typeof DATASOURCE): T;
      withTarget(t: ClickHouseQueryBuilder): T;
      span(w: number): T;
      height(h: number): T;
    },
  >(
    b: T,
  ) =>
    b
      .title(p.title)
      .description(p.description)
      .datasource(DATASOURCE)
      .withTarget(target)
      .span(p.w ?? 24)
      .height(p.h ?? 8);
  switch (p.kind) {
    case 'timeseries': {
      const b = base(new timeseries.PanelBuilder());
      if (p.unit) b.unit(p.unit);
      if (p.key === 'mfu')
        b.min(0).overrideByName('tflops_per_gpu', [
          { id: 'unit', value: 'none' },
          { id: 'custom.axisPlacement', value: 'right' },
        ]);
      return b;
    }
    case 'heatmap':
      return base(new heatmap.PanelBuilder())
        .calculate(false)
        .unit(p.unit ?? 'none')
        .color(
          new heatmap.HeatmapColorOptionsBuilder()
            .mode(heatmap.HeatmapColorMode.Scheme)
            .scheme('RdYlBu')
            .reverse(true)
            .steps(64)
            .min(-20)
            .max(20),
        )
        .rowsFrame(new heatmap.RowsHeatmapOptionsBuilder().layout(common.HeatmapCellLayout.Unknown))
        .cellGap(0)
        .yAxis(new heatmap.YAxisConfigBuilder().reverse(true));
    case 'stat': {
      const b = base(new stat.PanelBuilder());
      return p.unit ? b.unit(p.unit) : b;
    }
    default: {
      const b = base(new table.PanelBuilder());
      return p.unit ? b.unit(p.unit) : b;
    }
  }
}

export function buildDashboard(key: DashboardKey): dashboard.Dashboard {
  const d = DASHBOARDS[key];
  const b = new dashboard.DashboardBuilder(d.title)
    .uid(d.uid)
    .description(d.description)
    .tags(['rankwatch'])
    .editable()
    .time({ from: 'now-6h', to: 'now' })
    .refresh('1m')
    .timezone('utc')
    .withVariable(
      new dashboard.DatasourceVariableBuilder('datasource')
        .label('ClickHouse')
        .type('grafana-clickhouse-datasource'),
    )
    .withVariable(
      new dashboard.QueryVariableBuilder('job')
        .label('Job')
        .datasource(DATASOURCE)
        .query(VARIABLES.job)
        .definition(VARIABLES.job)
        .refresh(dashboard.VariableRefresh.OnTimeRangeChanged)
        .sort(dashboard.VariableSort.AlphabeticalAsc),
    );
  if (d.host)
    b.withVariable(
      new dashboard.QueryVariableBuilder('host')
        .label('Host')
        .datasource(DATASOURCE)
        .query(VARIABLES.host)
        .definition(VARIABLES.host)
        .refresh(dashboard.VariableRefresh.OnTimeRangeChanged)
        .sort(dashboard.VariableSort.NaturalAsc)
        .multi(true)
        .includeAll(true),
    );
  if (key === 'job')
    for (const [name, sql] of Object.entries(ANNOTATIONS))
      b.annotation(
        new dashboard.AnnotationQueryBuilder()
          .name(name === 'checkpoints' ? 'Checkpoint saves' : 'Interruptions')
          .datasource(DATASOURCE)
          .enable(true)
          .iconColor(name === 'checkpoints' ? 'blue' : 'red')
          .target(new ClickHouseQueryBuilder(sql, 'table')),
      );
  for (const p of PANELS.filter((x) => x.dashboard === key)) b.withPanel(panel(p));
  return b.build();
}

export const DASHBOARD_DIR = join(import.meta.dirname, 'json');
export const dashboardFile = (key: DashboardKey) => join(DASHBOARD_DIR, `${DASHBOARDS[key].uid}.json`);
export const render = (key: DashboardKey) => `${JSON.stringify(buildDashboard(key), null, 2)}\n`;

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))) {
  for (const key of Object.keys(DASHBOARDS) as DashboardKey[]) {
    writeFileSync(dashboardFile(key), render(key));
    process.stdout.write(`wrote ${dashboardFile(key)}\n`);
  }
  // Laid out as `npm run lint` wants it (the staleness test compares data, not layout).
  execFileSync('npx', ['biome', 'format', '--write', DASHBOARD_DIR], { stdio: 'inherit' });
}
