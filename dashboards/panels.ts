/**
 * Every Grafana panel's SQL with the columns it must return, grouped by dashboard. build.ts turns
 * these into dashboards with the Grafana Foundation SDK; dashboard.test.ts runs each query on a
 * simulated job in chDB with the macros expanded (macros.ts) and checks the columns and types.
 *
 * Variables: ${job:singlequote} (one job), ${host:singlequote} (hosts, multi-value, All = every
 * host), and the dashboard's time range through $__timeFilter / $__timeInterval.
 */

import { JOB_MFU_SQL } from '../store/queries.js';

// biome-ignore-start lint/suspicious/noTemplateCurlyInString: Grafana variables, filled in by Grafana
const JOB = '${job:singlequote}';
const HOSTS = '${host:singlequote}';
// biome-ignore-end lint/suspicious/noTemplateCurlyInString: Grafana variables

/** What a column must be: a time (first column of a time series), a number or a string. */
export type Col = 'time' | 'number' | 'string';
export type Kind = 'timeseries' | 'table' | 'heatmap' | 'stat';
export type DashboardKey = 'job' | 'ranks' | 'links' | 'fleet' | 'failures';

export interface PanelSpec {
  dashboard: DashboardKey;
  key: string;
  title: string;
  description: string;
  kind: Kind;
  sql: string;
  columns: Record<string, Col>;
  unit?: string;
  /** Width in grid columns (of 24) and height in rows. */
  w?: number;
  h?: number;
  /** A simulated job need not produce rows (e.g. no interruption happened). */
  mayBeEmpty?: boolean;
}

/** Incidents in their latest state, one row per finding id. Filtered before grouping: the aliases below would otherwise stand for the columns in WHERE. */
const latestFindings = (where: string) => `SELECT id, max(ts) AS time,
    argMax(type, ts) AS type, argMax(state, (ts, indexOf(['open', 'update', 'resolved'], state))) AS latest_state,
    argMax(severity, ts) AS severity, argMax(job, ts) AS job, argMax(host, ts) AS host,
    argMax(gpu, ts) AS gpu, argMax(rank, ts) AS rank, argMax(peer_host, ts) AS peer_host,
    argMax(est_cost_pct, ts) AS cost_pct, argMax(action, ts) AS action, argMax(summary, ts) AS summary
  FROM (SELECT * FROM findings FINAL WHERE ${where})
  GROUP BY id`;

/** Bus bandwidth of one collective in GB/s, as nccl-tests defines it (algbw × 2(n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter). */
const BUSBW = `JSONExtractFloat(raw, 'bytes') / nullIf(JSONExtractFloat(raw, 'dur_ms') * 1e6, 0)
    * multiIf(n <= 1, 1, op = 'allreduce', 2 * (n - 1) / n, op IN ('allgather', 'reducescatter'), (n - 1) / n, 1)`;
const COLLECTIVES = `SELECT ts, host, JSONExtractString(raw, 'op') AS op, toFloat64(JSONExtractUInt(raw, 'nranks')) AS n, raw
    FROM events
    WHERE kind = 'collective' AND job = ${JOB} AND host IN (${HOSTS}) AND $__timeFilter(ts)`;

export const VARIABLES = {
  job: `SELECT DISTINCT job FROM job_minute WHERE $__timeFilter(minute) ORDER BY job`,
  host: `SELECT DISTINCT host FROM rank_minute WHERE job = ${JOB} AND $__timeFilter(minute) ORDER BY host`,
};

export const PANELS: PanelSpec[] = [
  // Job overview
  {
    dashboard: 'job',
    key: 'mfu_now',
    title: 'MFU (last step)',
    description:
      'Model FLOPs utilisation of the latest step in the range. Empty: the job event gave no model or an unknown GPU, or the figure cannot be true (see the mfu_implausible finding).',
    kind: 'stat',
    sql: `SELECT argMax(mfu, ts) AS mfu FROM mfu FINAL WHERE job = ${JOB} AND implausible = '' AND $__timeFilter(ts)`,
    columns: { mfu: 'number' },
    unit: 'percentunit',
    w: 6,
    h: 4,
  },
  {
    dashboard: 'job',
    key: 'tokens_now',
    title: 'Tokens/s (range)',
    description: "The job's tokens per second over the range.",
    kind: 'stat',
    sql: `SELECT sum(tokens) / nullIf(sum(step_ms) / 1000, 0) AS tokens_per_s FROM mfu FINAL WHERE job = ${JOB} AND $__timeFilter(ts)`,
    columns: { tokens_per_s: 'number' },
    unit: 'short',
    w: 6,
    h: 4,
  },
  {
    dashboard: 'job',
    key: 'open_findings',
    title: 'Open findings',
    description: 'Incidents of this job not resolved yet.',
    kind: 'stat',
    sql: `SELECT count() AS open_findings FROM (${latestFindings(`job = ${JOB}`)}) WHERE latest_state != 'resolved'`,
    columns: { open_findings: 'number' },
    w: 6,
    h: 4,
  },
  {
    dashboard: 'job',
    key: 'costliest',
    title: 'Costliest open finding',
    description:
      "Share of the job's throughput the costliest open finding costs (not a sum: findings overlap).",
    kind: 'stat',
    sql: `SELECT max(cost_pct) AS cost_pct FROM (${latestFindings(`job = ${JOB}`)}) WHERE latest_state != 'resolved'`,
    columns: { cost_pct: 'number' },
    unit: 'percent',
    w: 6,
    h: 4,
  },
  {
    dashboard: 'job',
    key: 'mfu',
    title: 'MFU and TFLOP/s per GPU',
    description:
      "Model FLOPs utilisation per interval: its steps' FLOPs over their wall time, as rankwatch's screens compute a job's MFU. Annotations: checkpoint saves and interruptions.",
    kind: 'timeseries',
    sql: `SELECT $__timeInterval(ts) AS time, ${JOB_MFU_SQL} AS mfu, sum(tflops_per_gpu * step_ms) / sum(step_ms) AS tflops_per_gpu
FROM mfu FINAL
WHERE job = ${JOB} AND implausible = '' AND $__timeFilter(ts)
GROUP BY time ORDER BY time`,
    columns: { time: 'time', mfu: 'number', tflops_per_gpu: 'number' },
    unit: 'percentunit',
    w: 12,
  },
  {
    dashboard: 'job',
    key: 'tokens',
    title: 'Tokens/s',
    description: 'Job tokens per second per interval.',
    kind: 'timeseries',
    sql: `SELECT $__timeInterval(ts) AS time, sum(tokens) / nullIf(sum(step_ms) / 1000, 0) AS tokens_per_s
FROM mfu FINAL
WHERE job = ${JOB} AND $__timeFilter(ts)
GROUP BY time ORDER BY time`,
    columns: { time: 'time', tokens_per_s: 'number' },
    unit: 'short',
    w: 12,
  },
  {
    dashboard: 'job',
    key: 'steps',
    title: 'Step time',
    description:
      'Wall step time, median and slowest compute, median wait in collectives. The slowest compute pulling away from the median is what a straggler costs every rank.',
    kind: 'timeseries',
    sql: `SELECT $__timeInterval(ts) AS time, avg(step_ms) AS step_ms, avg(compute_p50_ms) AS compute_p50_ms,
  max(compute_max_ms) AS compute_max_ms, avg(comm_wait_p50_ms) AS comm_wait_p50_ms
FROM step_rollups FINAL
WHERE job = ${JOB} AND $__timeFilter(ts)
GROUP BY time ORDER BY time`,
    columns: {
      time: 'time',
      step_ms: 'number',
      compute_p50_ms: 'number',
      compute_max_ms: 'number',
      comm_wait_p50_ms: 'number',
    },
    unit: 'ms',
    w: 24,
  },
  {
    dashboard: 'job',
    key: 'findings',
    title: 'Findings',
    description: 'Incidents in their latest state, newest first, with what each costs.',
    kind: 'table',
    sql: `SELECT time, type, latest_state, severity, host, gpu, rank, peer_host, cost_pct, action, summary
FROM (${latestFindings(`job = ${JOB} AND $__timeFilter(ts)`)})
ORDER BY time DESC LIMIT 500`,
    columns: {
      time: 'time',
      type: 'string',
      latest_state: 'string',
      host: 'string',
      cost_pct: 'number',
      summary: 'string',
    },
    w: 24,
    h: 10,
  },
  // Rank heatmap
  {
    dashboard: 'ranks',
    key: 'heatmap',
    title: 'Compute vs stage peers, per rank (% slower)',
    description:
      "Each rank's mean compute per minute against the median of its pipeline-stage peers: a straggler is a hot row, a job-wide slowdown changes nothing.",
    kind: 'heatmap',
    sql: `SELECT time, label, pct_slower FROM (
  SELECT time, h, label, round(100 * (c / median(c) OVER (PARTITION BY time, st) - 1), 1) AS pct_slower
  FROM (
    SELECT minute AS time, anyLast(host) AS h, anyLast(stage) AS st,
      concat(h, ' r', leftPad(toString(rank), 5, '0')) AS label, avgMerge(compute_ms) AS c
    FROM rank_minute
    WHERE job = ${JOB} AND $__timeFilter(minute)
    GROUP BY time, rank
  )
)
WHERE h IN (${HOSTS})
ORDER BY time, label`,
    columns: { time: 'time', label: 'string', pct_slower: 'number' },
    unit: 'percent',
    w: 24,
    h: 16,
  },
  {
    dashboard: 'ranks',
    key: 'slowest',
    title: 'Slowest ranks against their stage peers',
    description:
      'Mean % slower than the stage median over the range; a throttled GPU or a slow rank tops this list.',
    kind: 'table',
    sql: `SELECT h AS host, g AS gpu, r AS rank, st AS stage, round(avg(pct), 1) AS pct_slower,
  round(max(pct), 1) AS worst_minute_pct, count() AS minutes
FROM (
  SELECT h, g, r, st, 100 * (c / median(c) OVER (PARTITION BY m, st) - 1) AS pct
  FROM (
    SELECT minute AS m, rank AS r, toString(anyLast(host)) AS h, toInt16(anyLast(gpu)) AS g, toInt16(anyLast(stage)) AS st,
      avgMerge(compute_ms) AS c
    FROM rank_minute
    WHERE job = ${JOB} AND $__timeFilter(minute)
    GROUP BY m, r
  )
)
WHERE h IN (${HOSTS})
GROUP BY h, g, r, st
ORDER BY pct_slower DESC LIMIT 20`,
    columns: {
      host: 'string',
      gpu: 'number',
      rank: 'number',
      stage: 'number',
      pct_slower: 'number',
      minutes: 'number',
    },
    w: 24,
    h: 9,
  },
  // Links
  {
    dashboard: 'links',
    key: 'busbw',
    title: 'Bus bandwidth by collective',
    description:
      'Mean bus bandwidth (nccl-tests definition) per collective kind, from the collective events.',
    kind: 'timeseries',
    sql: `SELECT $__timeInterval(ts) AS time, op, avg(${BUSBW}) AS busbw_gbs
FROM (${COLLECTIVES})
GROUP BY time, op ORDER BY time`,
    columns: { time: 'time', op: 'string', busbw_gbs: 'number' },
    unit: 'GBs',
    w: 24,
  },
  {
    dashboard: 'links',
    key: 'busbw_by_host',
    title: 'Bus bandwidth by host and collective (slowest first)',
    description:
      'Median and 10th percentile bus bandwidth of the collectives each host took part in; a slow NIC sits at the top.',
    kind: 'table',
    sql: `SELECT host, op, quantile(0.5)(${BUSBW}) AS busbw_p50_gbs, quantile(0.1)(${BUSBW}) AS busbw_p10_gbs, count() AS collectives
FROM (${COLLECTIVES})
GROUP BY host, op ORDER BY busbw_p50_gbs ASC LIMIT 100`,
    columns: { host: 'string', op: 'string', busbw_p50_gbs: 'number', collectives: 'number' },
    w: 12,
    h: 10,
  },
  {
    dashboard: 'links',
    key: 'slow_links',
    title: 'Slow links',
    description:
      'Link findings in the range, open ones first: the host (and NIC rail or GPU) common to the slow communicators, and the peer when it is pair-specific.',
    kind: 'table',
    sql: `SELECT time, type, latest_state, host, gpu, peer_host, cost_pct, action, summary
FROM (${latestFindings(`job = ${JOB} AND type IN ('slow_link', 'nccl_busbw_low', 'nccl_busbw_collapse', 'nccl_slow_host') AND $__timeFilter(ts)`)})
ORDER BY latest_state = 'resolved', cost_pct DESC`,
    columns: {
      time: 'time',
      type: 'string',
      latest_state: 'string',
      host: 'string',
      peer_host: 'string',
      cost_pct: 'number',
    },
    w: 12,
    h: 10,
  },
  // Fleet health
  {
    dashboard: 'fleet',
    key: 'nodes',
    title: 'Node health',
    description:
      'Faults and GPU-minutes throttled for a reason that matters (0x8, 0x20, 0x40, 0x80), per host, worst first.',
    kind: 'table',
    sql: `SELECT g.host AS host, g.throttled_gpu_minutes AS throttled_gpu_minutes, g.min_sm_clock_mhz AS min_sm_clock_mhz,
  g.max_temp_c AS max_temp_c, f.faults AS faults, f.sources AS fault_sources
FROM (
  SELECT host, countIf(throttled) AS throttled_gpu_minutes, toFloat64(min(clk)) AS min_sm_clock_mhz, toFloat64(max(temp)) AS max_temp_c
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
    columns: {
      host: 'string',
      throttled_gpu_minutes: 'number',
      min_sm_clock_mhz: 'number',
      faults: 'number',
      fault_sources: 'string',
    },
    w: 24,
    h: 10,
  },
  {
    dashboard: 'fleet',
    key: 'throttled',
    title: 'Throttled GPUs per host',
    description:
      'GPUs throttled for a reason that matters, per host and interval (the software power cap alone is not counted).',
    kind: 'timeseries',
    sql: `SELECT $__timeInterval(minute) AS time, host, countIf(throttled) AS throttled_gpus
FROM (
  SELECT minute, host, gpu, countIfMerge(throttled_samples) > 0 AS throttled
  FROM gpu_minute WHERE $__timeFilter(minute) AND host IN (${HOSTS}) GROUP BY minute, host, gpu
)
GROUP BY time, host ORDER BY time`,
    columns: { time: 'time', host: 'string', throttled_gpus: 'number' },
    w: 12,
  },
  {
    dashboard: 'fleet',
    key: 'cordon',
    title: 'Cordon list',
    description:
      'Hosts an open finding asks to cordon, drain or RMA (the strongest action asked), as GET /v1/cordon lists them.',
    kind: 'table',
    sql: `SELECT host, multiIf(has(groupUniqArray(action), 'rma'), 'rma', has(groupUniqArray(action), 'drain'), 'drain', 'cordon') AS strongest_action,
  count() AS findings, arrayStringConcat(groupUniqArray(type), ', ') AS types, max(time) AS last_seen
FROM (${latestFindings('$__timeFilter(ts)')})
WHERE latest_state != 'resolved' AND action IN ('cordon', 'drain', 'rma')
GROUP BY host ORDER BY strongest_action DESC, findings DESC`,
    columns: {
      host: 'string',
      strongest_action: 'string',
      findings: 'number',
      types: 'string',
      last_seen: 'time',
    },
    w: 12,
  },
  // Failures and checkpoints
  {
    dashboard: 'failures',
    key: 'faults_by_source',
    title: 'Faults by source',
    description: 'Faults (XID, ECC, NCCL timeouts, exits, links) per interval and source.',
    kind: 'timeseries',
    sql: `SELECT $__timeInterval(ts) AS time, source, count() AS faults
FROM faults FINAL
WHERE $__timeFilter(ts) AND host IN (${HOSTS})
GROUP BY time, source ORDER BY time`,
    columns: { time: 'time', source: 'string', faults: 'number' },
    w: 12,
  },
  {
    dashboard: 'failures',
    key: 'fault_rate',
    title: 'Faults per 1000 GPU-hours',
    description:
      'Faults in the range over the GPU-hours the fleet reported telemetry for: the failure rate checkpoint intervals are chosen from.',
    kind: 'stat',
    sql: `SELECT 1000 * (SELECT count() FROM faults FINAL WHERE $__timeFilter(ts))
  / nullIf((SELECT count() FROM (SELECT DISTINCT host, gpu, minute FROM gpu_minute WHERE $__timeFilter(minute))) / 60, 0) AS faults_per_1000_gpu_hours`,
    columns: { faults_per_1000_gpu_hours: 'number' },
    w: 12,
  },
  {
    dashboard: 'failures',
    key: 'checkpoint_durations',
    title: 'Checkpoint durations',
    description: 'Slowest rank per checkpoint and phase (save/load), seconds.',
    kind: 'timeseries',
    sql: `SELECT $__timeInterval(ts) AS time, phase, max(dur_ms) / 1000 AS seconds
FROM checkpoints FINAL
WHERE job = ${JOB} AND $__timeFilter(ts)
GROUP BY time, phase ORDER BY time`,
    columns: { time: 'time', phase: 'string', seconds: 'number' },
    unit: 's',
    w: 12,
  },
  {
    dashboard: 'failures',
    key: 'checkpoint_stats',
    title: 'Checkpoints per phase',
    description:
      'Count, failures and durations per phase; failures are checkpoints reported with ok = false.',
    kind: 'table',
    sql: `SELECT phase, uniqExact(step) AS checkpoints, countIf(ok = 0) AS failed_writes,
  quantile(0.5)(dur_ms) / 1000 AS p50_s, quantile(0.95)(dur_ms) / 1000 AS p95_s, max(dur_ms) / 1000 AS max_s
FROM checkpoints FINAL
WHERE job = ${JOB} AND $__timeFilter(ts)
GROUP BY phase ORDER BY phase`,
    columns: {
      phase: 'string',
      checkpoints: 'number',
      failed_writes: 'number',
      p50_s: 'number',
      max_s: 'number',
    },
    w: 12,
  },
  {
    dashboard: 'failures',
    key: 'interruptions',
    title: 'Interruptions and restarts',
    description: "The job's lifecycle events other than its configuration.",
    kind: 'table',
    sql: `SELECT ts AS time, event, cause FROM job_events FINAL
WHERE job = ${JOB} AND $__timeFilter(ts) AND event != 'config'
ORDER BY time DESC LIMIT 200`,
    columns: { time: 'time', event: 'string', cause: 'string' },
    w: 12,
  },
  {
    dashboard: 'failures',
    key: 'faults',
    title: 'Faults',
    description: 'Newest first.',
    kind: 'table',
    sql: `SELECT ts AS time, host, gpu, job, rank, source, code, message FROM faults FINAL
WHERE $__timeFilter(ts) AND host IN (${HOSTS})
ORDER BY time DESC LIMIT 500`,
    columns: { time: 'time', host: 'string', source: 'string', message: 'string' },
    w: 12,
  },
  {
    dashboard: 'failures',
    key: 'checkpoint_advice',
    title: 'Checkpoint interval advice',
    description:
      'The checkpoint interval the failure rate and save time call for (Young/Daly), from checkpoint_interval findings.',
    kind: 'table',
    sql: `SELECT time, job, summary FROM (${latestFindings("type = 'checkpoint_interval' AND $__timeFilter(ts)")})
ORDER BY time DESC LIMIT 50`,
    columns: { time: 'time', job: 'string', summary: 'string' },
    w: 24,
    mayBeEmpty: true,
  },
];

/** Annotations on the job overview: checkpoint saves and interruptions. */
export const ANNOTATIONS = {
  checkpoints: `SELECT min(ts) AS time, concat('checkpoint ', phase, ' at step ', toString(step), ': ', toString(round(max(dur_ms) / 1000, 1)), ' s',
  if(min(ok) = 0, ' (failed)', '')) AS text
FROM checkpoints FINAL
WHERE job = ${JOB} AND $__timeFilter(ts)
GROUP BY phase, step ORDER BY time`,
  interruptions: `SELECT ts AS time, concat(event, if(cause = '', '', concat(': ', cause))) AS text
FROM job_events FINAL
WHERE job = ${JOB} AND $__timeFilter(ts) AND event IN ('interrupted', 'restart')
ORDER BY time`,
};
