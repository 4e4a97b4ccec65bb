/**
 * The Grafana dashboard as code: `npx tsx dashboards/build.ts` writes dashboards/rankwatch.json,
 * for Grafana ≥ 10 with the ClickHouse data source plugin (grafana-clickhouse-datasource ≥ 4) over
 * the rankwatch tables. dashboards/dashboard.test.ts fails when the JSON is stale and runs every
 * panel's SQL against the real schema (chDB), with Grafana's macros filled in.
 *
 * Grafana, not rankwatch, fills `${job:singlequote}` into the SQL: give the data source a read-only
 * ClickHouse user (see docs/clickhouse.md), as the plugin's documentation asks.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

// biome-ignore lint/suspicious/noTemplateCurlyInString: a Grafana variable, filled in by Grafana
const DS = { type: 'grafana-clickhouse-datasource', uid: '${datasource}' };

/** grafana-clickhouse-datasource v4 query: format 0 = time series, 1 = table. */
function target(rawSql: string, kind: 'timeseries' | 'table') {
  return {
    datasource: DS,
    editorType: 'sql',
    format: kind === 'timeseries' ? 0 : 1,
    queryType: kind,
    rawSql,
    refId: 'A',
  };
}

// biome-ignore lint/suspicious/noTemplateCurlyInString: a Grafana variable, filled in by Grafana
const JOB = '${job:singlequote}';

export const PANELS = {
  mfu: `SELECT $__timeInterval(ts) AS time, avg(mfu) AS mfu, avg(tflops_per_gpu) AS tflops_per_gpu
FROM mfu FINAL
WHERE job = ${JOB} AND implausible = '' AND $__timeFilter(ts)
GROUP BY time ORDER BY time`,
  heatmap: `SELECT minute AS time, toString(rank) AS rank, avgMerge(compute_ms) AS compute_ms
FROM rank_minute
WHERE job = ${JOB} AND $__timeFilter(minute)
GROUP BY time, rank ORDER BY time, rank`,
  findings: `SELECT max(ts) AS time, id,
  argMax(type, ts) AS type,
  argMax(state, (ts, indexOf(['open', 'update', 'resolved'], state))) AS latest_state,
  argMax(severity, ts) AS severity, argMax(host, ts) AS host, argMax(rank, ts) AS rank,
  argMax(est_cost_pct, ts) AS cost_pct, argMax(action, ts) AS action, argMax(summary, ts) AS summary
FROM findings FINAL
WHERE job = ${JOB} AND $__timeFilter(ts)
GROUP BY id ORDER BY time DESC LIMIT 500`,
  nodes: `SELECT g.host AS host, g.throttled_gpu_minutes AS throttled_gpu_minutes, g.min_sm_clock_mhz AS min_sm_clock_mhz,
  g.max_temp_c AS max_temp_c, f.faults AS faults, f.sources AS fault_sources
FROM (
  SELECT host, countIf(throttled) AS throttled_gpu_minutes, min(clk) AS min_sm_clock_mhz, max(temp) AS max_temp_c
  FROM (
    SELECT host, gpu, minute, countIfMerge(throttled_samples) > 0 AS throttled,
      min(sm_clock_min_mhz) AS clk, max(temp_max_c) AS temp
    FROM gpu_minute WHERE $__timeFilter(minute) GROUP BY host, gpu, minute
  ) GROUP BY host
) AS g
LEFT JOIN (
  SELECT host, count() AS faults, arrayStringConcat(groupUniqArray(source), ', ') AS sources
  FROM faults FINAL WHERE $__timeFilter(ts) GROUP BY host
) AS f ON f.host = g.host
ORDER BY faults DESC, throttled_gpu_minutes DESC, host
LIMIT 200`,
  jobVariable: `SELECT DISTINCT job FROM job_minute WHERE $__timeFilter(minute) ORDER BY job`,
};

export function buildDashboard() {
  const grid = (x: number, y: number, w: number, h: number) => ({ x, y, w, h });
  return {
    uid: 'rankwatch-job',
    title: 'rankwatch: training job',
    description: 'MFU, per-rank compute, findings and node health from the rankwatch ClickHouse tables.',
    tags: ['rankwatch'],
    schemaVersion: 39,
    version: 1,
    editable: true,
    time: { from: 'now-6h', to: 'now' },
    refresh: '1m',
    timezone: 'utc',
    templating: {
      list: [
        {
          name: 'datasource',
          label: 'ClickHouse',
          type: 'datasource',
          query: 'grafana-clickhouse-datasource',
        },
        {
          name: 'job',
          label: 'Job',
          type: 'query',
          datasource: DS,
          query: PANELS.jobVariable,
          definition: PANELS.jobVariable,
          refresh: 2,
          sort: 1,
        },
      ],
    },
    panels: [
      {
        id: 1,
        type: 'timeseries',
        title: 'MFU',
        description: 'Model FLOPs utilisation per step, averaged per interval.',
        datasource: DS,
        gridPos: grid(0, 0, 24, 8),
        fieldConfig: {
          defaults: { unit: 'percentunit', min: 0 },
          overrides: [
            {
              matcher: { id: 'byName', options: 'tflops_per_gpu' },
              properties: [{ id: 'unit', value: 'none' }],
            },
          ],
        },
        targets: [target(PANELS.mfu, 'timeseries')],
      },
      {
        id: 2,
        type: 'heatmap',
        title: 'Compute per rank (ms)',
        description:
          'Mean busy time per rank and minute: a straggler is a hot row, a job-wide slowdown a hot column.',
        datasource: DS,
        gridPos: grid(0, 8, 24, 12),
        options: {
          calculate: false,
          yAxis: { axisPlacement: 'left' },
          rowsFrame: { layout: 'auto' },
          color: { mode: 'scheme', scheme: 'Oranges', steps: 64 },
          cellGap: 0,
        },
        targets: [target(PANELS.heatmap, 'timeseries')],
      },
      {
        id: 3,
        type: 'table',
        title: 'Findings',
        description: 'Incidents in their latest state, newest first.',
        datasource: DS,
        gridPos: grid(0, 20, 24, 10),
        targets: [target(PANELS.findings, 'table')],
      },
      {
        id: 4,
        type: 'table',
        title: 'Node health',
        description:
          'Faults and GPU-minutes throttled for a reason that matters (0x8, 0x20, 0x40, 0x80), per host.',
        datasource: DS,
        gridPos: grid(0, 30, 24, 10),
        targets: [target(PANELS.nodes, 'table')],
      },
    ],
  };
}

export const DASHBOARD_FILE = join(import.meta.dirname, 'rankwatch.json');
export const render = () => `${JSON.stringify(buildDashboard(), null, 2)}\n`;

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))) {
  writeFileSync(DASHBOARD_FILE, render());
  process.stdout.write(`wrote ${DASHBOARD_FILE}\n`);
}
