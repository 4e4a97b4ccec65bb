/**
 * The reads people run (API, dashboards, CLI), shared by every driver. Every outside value is a
 * bound `{name:Type}` parameter; optional filters add fixed SQL fragments, never values. Times go
 * in and come out as epoch milliseconds. Rollup tables are read with their -Merge combinators, raw
 * tables with FINAL, so a redelivered batch never shows twice.
 */
import type { Finding } from '../schema/finding.js';
import type { Store } from './store.js';

export interface TimeRange {
  /** Epoch ms, inclusive. */
  from?: number;
  /** Epoch ms, exclusive. */
  to?: number;
}

/** WHERE fragments for a time range on `col` (a DateTime64 or DateTime column). */
export function timeFilter(col: string, r: TimeRange, params: Record<string, unknown>): string[] {
  const out: string[] = [];
  if (r.from !== undefined) {
    params.from = Math.floor(r.from);
    out.push(`${col} >= fromUnixTimestamp64Milli({from:Int64}, 'UTC')`);
  }
  if (r.to !== undefined) {
    params.to = Math.floor(r.to);
    out.push(`${col} < fromUnixTimestamp64Milli({to:Int64}, 'UTC')`);
  }
  return out;
}

export const where = (conds: string[]) => (conds.length ? `WHERE ${conds.join(' AND ')}` : '');

export async function findingsOf(store: Store, job?: string): Promise<Finding[]> {
  const rows = await store.query<{ raw: string }>(
    `SELECT raw FROM findings FINAL ${job === undefined ? '' : 'WHERE job = {job:String}'} ORDER BY ts, id, state`,
    job === undefined ? {} : { job },
  );
  return rows.map((r) => JSON.parse(r.raw) as Finding);
}

export async function mfuOf(store: Store, job: string): Promise<{ step: number; mfu: number; ts: string }[]> {
  return store.query('SELECT step, mfu, ts FROM mfu FINAL WHERE job = {job:String} ORDER BY step', { job });
}

export async function tableCounts(store: Store): Promise<Record<string, number>> {
  const tables = ['events', 'steps', 'mfu', 'step_rollups', 'findings', 'dead_letters'];
  const out: Record<string, number> = {};
  for (const t of tables) {
    const [row] = await store.query<{ n: string }>(`SELECT count() AS n FROM ${t} FINAL`);
    out[t] = Number(row?.n ?? 0);
  }
  return out;
}

/**
 * A job's MFU over a set of its steps: total model FLOPs over total wall time, i.e. each step's
 * MFU weighted by its wall time (what the runner's overall figure is), plausible figures only.
 * Every screen's job MFU (the demo's summary, `report`, the API, the page) is this.
 */
export const JOB_MFU_SQL = "sumIf(mfu * step_ms, implausible = '') / sumIf(step_ms, implausible = '')";

export interface JobSummary {
  job: string;
  /** `running`: steps seen within `activeWithinMs` of `now`; `finished`/`interrupted`: its last lifecycle event; else `stale`. */
  status: 'running' | 'finished' | 'interrupted' | 'stale';
  first_ts: number;
  last_ts: number;
  ranks: number;
  last_step: number;
  world_size: number;
  gpu_model: string;
  mfu_last: number | null;
  mfu_avg: number | null;
}

/** Jobs with steps in the range (default: the last day), running ones first, then most recent. */
export async function jobs(
  store: Store,
  opts: TimeRange & { now?: number; activeWithinMs?: number; limit?: number } = {},
): Promise<JobSummary[]> {
  const now = opts.now ?? Date.now();
  const params: Record<string, unknown> = {
    now: Math.floor(now),
    active: Math.floor(opts.activeWithinMs ?? 5 * 60_000),
    limit: opts.limit ?? 100,
  };
  const range = timeFilter('minute', { from: opts.from ?? now - 86_400_000, to: opts.to }, params);
  const rows = await store.query<Record<string, string | number | null>>(
    `SELECT j.job AS job, j.first_ts AS first_ts, j.last_ts AS last_ts, j.ranks AS ranks, j.last_step AS last_step,
       e.last_event AS last_event, e.world_size AS world_size, e.gpu_model AS gpu_model,
       m.mfu_last AS mfu_last, m.mfu_avg AS mfu_avg, m.has_mfu AS has_mfu
     FROM (
       SELECT job, toUnixTimestamp64Milli(toDateTime64(min(minute), 3)) AS first_ts,
         toUnixTimestamp64Milli(toDateTime64(max(minute), 3)) + 60000 AS last_ts,
         uniqExactMerge(ranks) AS ranks, max(last_step) AS last_step
       FROM job_minute ${where(range)} GROUP BY job
     ) AS j
     LEFT JOIN (
       SELECT job, argMaxIf(event, ts, event != 'config') AS last_event,
         maxIf(world_size, world_size > 0) AS world_size, anyIf(gpu_model, gpu_model != '') AS gpu_model
       FROM job_events FINAL GROUP BY job
     ) AS e ON e.job = j.job
     LEFT JOIN (
       SELECT job, argMax(mfu, step) AS mfu_last, ${JOB_MFU_SQL} AS mfu_avg, 1 AS has_mfu FROM mfu FINAL WHERE implausible = '' GROUP BY job
     ) AS m ON m.job = j.job
     ORDER BY (ifNull(e.last_event, '') NOT IN ('finished', 'interrupted')
       AND j.last_ts >= {now:Int64} - {active:Int64}) DESC, j.last_ts DESC, j.job
     LIMIT {limit:UInt32}`,
    params,
  );
  // A LEFT JOIN without a match gives 0, not NULL: a job with no MFU figure reads null, never an MFU of 0.
  return rows.map((r) => {
    const last = Number(r.last_ts);
    const ev = String(r.last_event ?? '');
    const status: JobSummary['status'] =
      ev === 'finished'
        ? 'finished'
        : ev === 'interrupted'
          ? 'interrupted'
          : last >= now - Number(params.active)
            ? 'running'
            : 'stale';
    return {
      job: String(r.job),
      status,
      first_ts: Number(r.first_ts),
      last_ts: last,
      ranks: Number(r.ranks),
      last_step: Number(r.last_step),
      world_size: Number(r.world_size ?? 0),
      gpu_model: String(r.gpu_model ?? ''),
      mfu_last: Number(r.has_mfu) === 1 && r.mfu_last !== null ? Number(r.mfu_last) : null,
      mfu_avg: Number(r.has_mfu) === 1 && r.mfu_avg !== null ? Number(r.mfu_avg) : null,
    };
  });
}

export interface MfuBucket {
  ts: number;
  mfu: number;
  tflops_per_gpu: number;
  step_ms: number;
  steps: number;
  /** Job tokens per second in the bucket; null when the job reports no tokens. */
  tokens_per_s: number | null;
}

/** A job's MFU over time per `bucketSeconds` (default 60): each bucket's FLOPs over its wall time (JOB_MFU_SQL). */
export async function mfuOverTime(
  store: Store,
  job: string,
  opts: TimeRange & { bucketSeconds?: number } = {},
): Promise<MfuBucket[]> {
  const params: Record<string, unknown> = { job, bucket: Math.max(1, Math.floor(opts.bucketSeconds ?? 60)) };
  // A figure that cannot be true (mfu.implausible) is never averaged in as if it were.
  const conds = ['job = {job:String}', "implausible = ''", ...timeFilter('ts', opts, params)];
  const rows = await store.query<Record<string, string | number>>(
    `SELECT toUnixTimestamp64Milli(toDateTime64(toStartOfInterval(ts, toIntervalSecond({bucket:UInt32})), 3)) AS t,
       ${JOB_MFU_SQL} AS mean_mfu, sum(tflops_per_gpu * step_ms) / sum(step_ms) AS mean_tflops, avg(step_ms) AS mean_step_ms, count() AS steps,
       if(sum(tokens) > 0 AND sum(step_ms) > 0, sum(tokens) / sum(step_ms) * 1000, NULL) AS tokens_per_s
     FROM mfu FINAL ${where(conds)} GROUP BY t ORDER BY t`,
    params,
  );
  return rows.map((r) => ({
    ts: Number(r.t),
    mfu: Number(r.mean_mfu),
    tflops_per_gpu: Number(r.mean_tflops),
    step_ms: Number(r.mean_step_ms),
    steps: Number(r.steps),
    tokens_per_s: r.tokens_per_s === null ? null : Number(r.tokens_per_s),
  }));
}

export interface HeatmapCell {
  /** Start of the cell, epoch ms. */
  minute: number;
  rank: number;
  host: string;
  gpu: number;
  stage: number;
  steps: number;
  compute_ms: number;
  compute_max_ms: number;
  comm_wait_ms: number | null;
  /** compute_ms over the median of the rank's stage peers in that minute (1 = typical). */
  rel_compute: number;
}

/** The heatmap's statement and parameters (exported for the bench, which times the engine alone). */
export function rankHeatmapQuery(
  job: string,
  range: TimeRange & { bucketMinutes?: number } = {},
): { sql: string; params: Record<string, unknown> } {
  const params: Record<string, unknown> = { job, bucket: Math.max(1, Math.floor(range.bucketMinutes ?? 1)) };
  const conds = ['job = {job:String}', ...timeFilter('minute', range, params)];
  const sql = `SELECT toUnixTimestamp64Milli(toDateTime64(cell, 3)) AS minute_ms, rank, host, gpu, stage, steps,
       compute_ms, compute_max_ms, comm_wait_ms,
       compute_ms / median(compute_ms) OVER (PARTITION BY cell, stage) AS rel_compute
     FROM (
       SELECT toStartOfInterval(minute, toIntervalMinute({bucket:UInt32})) AS cell, rank, any(host) AS host,
         any(gpu) AS gpu, any(stage) AS stage, countMerge(steps) AS steps,
         avgMerge(compute_ms) AS compute_ms, max(compute_max_ms) AS compute_max_ms,
         avgMerge(comm_wait_ms) AS comm_wait_ms
       FROM rank_minute ${where(conds)} GROUP BY cell, rank
     )
     ORDER BY minute_ms, rank`;
  return { sql, params };
}

/**
 * Per-rank compute for a job and time range, from the rank_minute rollup, in cells of
 * `bucketMinutes` (default 1). 4096 ranks over an hour is 245,760 one-minute cells: wide ranges
 * want wider cells, which the server aggregates before anything crosses the wire.
 */
export async function rankHeatmap(
  store: Store,
  job: string,
  range: TimeRange & { bucketMinutes?: number } = {},
): Promise<HeatmapCell[]> {
  const q = rankHeatmapQuery(job, range);
  const rows = await store.query<Record<string, string | number | null>>(q.sql, q.params);
  return rows.map((r) => ({
    minute: Number(r.minute_ms),
    rank: Number(r.rank),
    host: String(r.host),
    gpu: Number(r.gpu),
    stage: Number(r.stage),
    steps: Number(r.steps),
    compute_ms: Number(r.compute_ms),
    compute_max_ms: Number(r.compute_max_ms),
    comm_wait_ms: r.comm_wait_ms === null ? null : Number(r.comm_wait_ms),
    rel_compute: Number(r.rel_compute),
  }));
}

export interface FindingFilter extends TimeRange {
  type?: string;
  /** The incident's latest state. `active` means not resolved. */
  state?: 'open' | 'update' | 'resolved' | 'active';
  job?: string;
  host?: string;
  severity?: string;
  /** Paging: incidents strictly after this one in the newest-first order. */
  after?: { ts: number; id: string };
  limit?: number;
}

/**
 * Incidents (one per finding id, in their latest state) matching every given filter, newest first.
 * The time range applies to when the incident last changed.
 */
export async function findings(store: Store, f: FindingFilter = {}): Promise<Finding[]> {
  const params: Record<string, unknown> = { limit: f.limit ?? 500 };
  const conds: string[] = [];
  if (f.job !== undefined) {
    params.job = f.job;
    conds.push('job = {job:String}');
  }
  if (f.host !== undefined) {
    params.host = f.host;
    conds.push('host = {host:String}');
  }
  if (f.type !== undefined) {
    params.type = f.type;
    conds.push('type = {type:String}');
  }
  const having: string[] = [...timeFilter('last_ts', f, params)];
  if (f.severity !== undefined) {
    params.severity = f.severity;
    having.push('latest_severity = {severity:String}');
  }
  if (f.after !== undefined) {
    params.after_ts = Math.floor(f.after.ts);
    params.after_id = f.after.id;
    having.push(
      "(last_ts < fromUnixTimestamp64Milli({after_ts:Int64}, 'UTC') OR (last_ts = fromUnixTimestamp64Milli({after_ts:Int64}, 'UTC') AND id > {after_id:String}))",
    );
  }
  if (f.state === 'active') having.push("latest_state != 'resolved'");
  else if (f.state !== undefined) {
    params.state = f.state;
    having.push('latest_state = {state:String}');
  }
  // Latest by event time; at equal times resolved > update > open.
  const rows = await store.query<{ latest_raw: string }>(
    `SELECT id, argMax(raw, (ts, indexOf(['open', 'update', 'resolved'], state))) AS latest_raw,
       argMax(state, (ts, indexOf(['open', 'update', 'resolved'], state))) AS latest_state,
       argMax(severity, (ts, indexOf(['open', 'update', 'resolved'], state))) AS latest_severity, max(ts) AS last_ts
     FROM findings FINAL ${where(conds)}
     GROUP BY id ${having.length ? `HAVING ${having.join(' AND ')}` : ''}
     ORDER BY last_ts DESC, id LIMIT {limit:UInt32}`,
    params,
  );
  return rows.map((r) => JSON.parse(r.latest_raw) as Finding);
}

/** Every stored state of one incident (open, updates, resolve), oldest first; empty when unknown. */
export async function findingHistory(store: Store, id: string): Promise<Finding[]> {
  const rows = await store.query<{ raw: string }>(
    `SELECT raw FROM findings FINAL WHERE id = {id:String}
     ORDER BY ts, indexOf(['open', 'update', 'resolved'], state)`,
    { id },
  );
  return rows.map((r) => JSON.parse(r.raw) as Finding);
}

export interface FindingAck {
  id: string;
  /** `ack`: a person has seen it; `silence`: no alerts for it until `until`. */
  action: 'ack' | 'silence';
  ts: number;
  /** The name of the token that made it (never the token). */
  by: string;
  until: number | null;
  note: string;
}

export async function recordAck(store: Store, a: FindingAck): Promise<void> {
  await store.insert([
    {
      table: 'finding_acks',
      rows: [
        JSON.stringify({ ...a, ts: Math.round(a.ts), until: a.until === null ? null : Math.round(a.until) }),
      ],
    },
  ]);
}

/** Acks and silences of the given incidents, oldest first. */
export async function acksOf(store: Store, ids: string[]): Promise<FindingAck[]> {
  if (ids.length === 0) return [];
  const rows = await store.query<Record<string, string | number | null>>(
    `SELECT id, action, toUnixTimestamp64Milli(ts) AS t, by,
       if(until IS NULL, NULL, toUnixTimestamp64Milli(until)) AS u, note
     FROM finding_acks FINAL WHERE id IN {ids:Array(String)} ORDER BY ts`,
    { ids },
  );
  return rows.map((r) => ({
    id: String(r.id),
    action: r.action as FindingAck['action'],
    ts: Number(r.t),
    by: String(r.by),
    until: r.u === null ? null : Number(r.u),
    note: String(r.note),
  }));
}

export interface JobDetail {
  job: string;
  first_ts: number;
  last_ts: number;
  ranks: number;
  last_step: number;
  /** The last lifecycle event (`start`, `restart`, `interrupted`, `finished`), '' when none. */
  last_event: string;
  world_size: number;
  gpu_model: string;
  mfu_last: number | null;
  mfu_avg: number | null;
  /** Mean wall step time over the last `recentMinutes` with steps. */
  step_ms: number | null;
  compute_ms: number | null;
  /** Job tokens per second over the same window, from the MFU rows (null when no tokens reported). */
  tokens_per_s: number | null;
  hosts: string[];
}

/** When a job has steps stored (epoch ms, end of its last minute); null when it has none. */
export async function jobSpan(
  store: Store,
  job: string,
): Promise<{ first_ts: number; last_ts: number; ranks: number; last_step: number } | null> {
  const [j] = await store.query<Record<string, string | number | null>>(
    `SELECT toUnixTimestamp64Milli(toDateTime64(min(minute), 3)) AS first_ts,
       toUnixTimestamp64Milli(toDateTime64(max(minute), 3)) + 60000 AS last_ts,
       uniqExactMerge(ranks) AS ranks, max(last_step) AS last_step
     FROM job_minute WHERE job = {job:String} HAVING count() > 0`,
    { job },
  );
  return j
    ? {
        first_ts: Number(j.first_ts),
        last_ts: Number(j.last_ts),
        ranks: Number(j.ranks),
        last_step: Number(j.last_step),
      }
    : null;
}

/** One job's overview from the rollups; null when the job has no steps stored. */
export async function jobDetail(store: Store, job: string, recentMinutes = 5): Promise<JobDetail | null> {
  const j = await jobSpan(store, job);
  if (!j) return null;
  const recent = Number(j.last_ts) - Math.max(1, recentMinutes) * 60_000;
  const p = { job, recent };
  const [t] = await store.query<Record<string, string | number | null>>(
    `SELECT avgMerge(step_ms) AS step_ms, avgMerge(compute_ms) AS compute_ms
     FROM job_minute WHERE job = {job:String} AND minute >= fromUnixTimestamp64Milli({recent:Int64}, 'UTC')`,
    p,
  );
  const [m] = await store.query<Record<string, string | number | null>>(
    `SELECT sum(tokens) AS tokens, sum(step_ms) AS ms FROM mfu FINAL
     WHERE job = {job:String} AND ts >= fromUnixTimestamp64Milli({recent:Int64}, 'UTC')`,
    p,
  );
  const [e] = await store.query<Record<string, string | number | null>>(
    `SELECT argMaxIf(event, ts, event != 'config') AS last_event, maxIf(world_size, world_size > 0) AS world_size,
       anyIf(gpu_model, gpu_model != '') AS gpu_model
     FROM job_events FINAL WHERE job = {job:String}`,
    { job },
  );
  const [u] = await store.query<Record<string, string | number | null>>(
    `SELECT argMax(mfu, step) AS mfu_last, ${JOB_MFU_SQL} AS mfu_avg, count() AS n FROM mfu FINAL WHERE job = {job:String}`,
    { job },
  );
  const hosts = await store.query<{ host: string }>(
    'SELECT DISTINCT host FROM rank_minute WHERE job = {job:String} ORDER BY host',
    { job },
  );
  const n = (v: unknown) => (v === null || v === undefined || Number.isNaN(Number(v)) ? null : Number(v));
  const tokens = Number(m?.tokens ?? 0);
  const ms = Number(m?.ms ?? 0);
  return {
    job,
    ...j,
    last_event: String(e?.last_event ?? ''),
    world_size: Number(e?.world_size ?? 0),
    gpu_model: String(e?.gpu_model ?? ''),
    mfu_last: Number(u?.n ?? 0) > 0 ? n(u?.mfu_last) : null,
    mfu_avg: Number(u?.n ?? 0) > 0 ? n(u?.mfu_avg) : null,
    step_ms: n(t?.step_ms),
    compute_ms: n(t?.compute_ms),
    tokens_per_s: tokens > 0 && ms > 0 ? (tokens / ms) * 1000 : null,
    hosts: hosts.map((h) => String(h.host)),
  };
}

export interface StepBucket {
  ts: number;
  steps: number;
  step_ms: number;
  compute_p50_ms: number;
  compute_max_ms: number;
  comm_wait_p50_ms: number;
}

/** A job's step time over time from the per-step rollups, in buckets of `bucketSeconds` (default 60). */
export async function stepsOverTime(
  store: Store,
  job: string,
  opts: TimeRange & { bucketSeconds?: number } = {},
): Promise<StepBucket[]> {
  const params: Record<string, unknown> = { job, bucket: Math.max(1, Math.floor(opts.bucketSeconds ?? 60)) };
  const conds = ['job = {job:String}', ...timeFilter('ts', opts, params)];
  const rows = await store.query<Record<string, string | number>>(
    `SELECT toUnixTimestamp64Milli(toDateTime64(toStartOfInterval(ts, toIntervalSecond({bucket:UInt32})), 3)) AS t,
       uniqExact(step) AS steps, avg(step_ms) AS step_ms, avg(compute_p50_ms) AS compute_p50_ms,
       max(compute_max_ms) AS compute_max_ms, avg(comm_wait_p50_ms) AS comm_wait_p50_ms
     FROM step_rollups FINAL ${where(conds)} GROUP BY t ORDER BY t`,
    params,
  );
  return rows.map((r) => ({
    ts: Number(r.t),
    steps: Number(r.steps),
    step_ms: Number(r.step_ms),
    compute_p50_ms: Number(r.compute_p50_ms),
    compute_max_ms: Number(r.compute_max_ms),
    comm_wait_p50_ms: Number(r.comm_wait_p50_ms),
  }));
}

/** Incidents not resolved, counted per job (what the jobs list shows). */
export async function openFindingCounts(store: Store): Promise<Map<string, number>> {
  const rows = await store.query<{ job: string; n: string | number }>(
    `SELECT job, count() AS n FROM (
       SELECT id, argMax(job, ts) AS job,
         argMax(state, (ts, indexOf(['open', 'update', 'resolved'], state))) AS st
       FROM findings FINAL GROUP BY id
     ) WHERE st != 'resolved' AND job != '' GROUP BY job`,
  );
  return new Map(rows.map((r) => [String(r.job), Number(r.n)]));
}

/** The latest event time the store holds (epoch ms), or undefined when it holds none. */
export async function latestEventTs(store: Store): Promise<number | undefined> {
  const [r] = await store.query<{ ts: string | null }>(
    'SELECT toUnixTimestamp64Milli(max(ts)) AS ts FROM events HAVING count() > 0',
  );
  return r?.ts == null ? undefined : Number(r.ts);
}

/** Raw events stored with `from <= ts < to`, oldest first, each once (FINAL), as they arrived. */
export async function rawEventsBetween(store: Store, from: number, to: number): Promise<string[]> {
  const rows = await store.query<{ raw: string }>(
    `SELECT raw FROM events FINAL
     WHERE ts >= fromUnixTimestamp64Milli({from:Int64}, 'UTC') AND ts < fromUnixTimestamp64Milli({to:Int64}, 'UTC')
     ORDER BY ts, kind, rank`,
    { from, to },
  );
  return rows.map((r) => r.raw);
}
