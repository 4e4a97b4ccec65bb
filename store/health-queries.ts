/**
 * Reads about machines and reliability: node health, fault history, checkpoint durations and
 * failure counts per cause. Same rules as queries.ts: bound parameters, times as epoch ms.
 */
import { type TimeRange, timeFilter, where } from './queries.js';
import type { Store } from './store.js';

type Row = Record<string, string | number | null>;

const num = (v: unknown) => (v === null || v === undefined ? 0 : Number(v));

export interface NodeHealth {
  host: string;
  faults: number;
  last_fault_ts: number | null;
  fault_sources: string[];
  /** GPU-minutes with a throttle reason that matters (0x8, 0x20, 0x40, 0x80). */
  throttled_gpu_minutes: number;
  min_sm_clock_mhz: number | null;
  max_temp_c: number | null;
  ecc_dbe: number;
  /** Incidents on the host whose latest state is not resolved. */
  active_findings: number;
  /** The strongest action any active incident asks for (`none` … `rma`). */
  worst_action: string;
}

const ACTIONS = ['none', 'watch', 'cordon', 'drain', 'rma'];

/** One row per host seen in faults, GPU telemetry or findings in the range; worst first. */
export async function nodeHealth(store: Store, r: TimeRange & { host?: string } = {}): Promise<NodeHealth[]> {
  const hostCond = r.host === undefined ? [] : ['host = {host:String}'];
  // One parameter object per statement: each carries exactly the placeholders it uses.
  const params = () => (r.host === undefined ? {} : { host: r.host }) as Record<string, unknown>;
  const pf = params();
  const faults = await store.query<Row>(
    `SELECT host, count() AS n, toUnixTimestamp64Milli(max(ts)) AS last_ts, groupUniqArray(source) AS sources
     FROM faults FINAL ${where([...hostCond, ...timeFilter('ts', r, pf)])} GROUP BY host`,
    pf,
  );
  const pg = params();
  const gpus = await store.query<Row>(
    `SELECT host, countIf(throttled) AS throttled_minutes, min(min_clock) AS min_clock,
       max(max_temp) AS max_temp, max(dbe) AS dbe
     FROM (
       SELECT host, gpu, minute, countIfMerge(throttled_samples) > 0 AS throttled,
         min(sm_clock_min_mhz) AS min_clock, max(temp_max_c) AS max_temp, max(ecc_dbe_max) AS dbe
       FROM gpu_minute ${where([...hostCond, ...timeFilter('minute', r, pg)])} GROUP BY host, gpu, minute
     ) GROUP BY host`,
    pg,
  );
  const pn = params();
  const found = await store.query<Row>(
    `SELECT h AS host, count() AS n, max(indexOf(['none', 'watch', 'cordon', 'drain', 'rma'], act)) AS worst
     FROM (
       SELECT id, argMax(host, ts) AS h,
         argMax(state, (ts, indexOf(['open', 'update', 'resolved'], state))) AS st,
         argMax(action, ts) AS act, max(ts) AS last_ts
       FROM findings FINAL ${where(hostCond)} GROUP BY id
     ) ${where(["st != 'resolved'", ...timeFilter('last_ts', r, pn)])} GROUP BY h`,
    pn,
  );
  const by = new Map<string, NodeHealth>();
  const get = (host: string) => {
    let h = by.get(host);
    if (!h) {
      h = quietNode(host);
      by.set(host, h);
    }
    return h;
  };
  for (const f of faults) {
    const h = get(String(f.host));
    h.faults = num(f.n);
    h.last_fault_ts = num(f.last_ts);
    h.fault_sources = (f.sources as unknown as string[]).slice().sort();
  }
  for (const g of gpus) {
    const h = get(String(g.host));
    h.throttled_gpu_minutes = num(g.throttled_minutes);
    h.min_sm_clock_mhz = num(g.min_clock);
    h.max_temp_c = num(g.max_temp);
    h.ecc_dbe = Math.max(0, num(g.dbe));
  }
  for (const f of found) {
    const h = get(String(f.host));
    h.active_findings = num(f.n);
    h.worst_action = ACTIONS[Math.max(0, num(f.worst) - 1)] ?? 'none';
  }
  const badness = (h: NodeHealth) => [ACTIONS.indexOf(h.worst_action), h.faults, h.throttled_gpu_minutes];
  return [...by.values()].sort((a, b) => {
    const x = badness(a);
    const y = badness(b);
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return y[i] - x[i];
    return a.host < b.host ? -1 : 1;
  });
}

/** A host with nothing against it: no faults, no throttling, no open findings. */
export function quietNode(host: string): NodeHealth {
  return {
    host,
    faults: 0,
    last_fault_ts: null,
    fault_sources: [],
    throttled_gpu_minutes: 0,
    min_sm_clock_mhz: null,
    max_temp_c: null,
    ecc_dbe: 0,
    active_findings: 0,
    worst_action: 'none',
  };
}

export interface FaultRow {
  ts: number;
  host: string;
  gpu: number;
  job: string;
  rank: number;
  source: string;
  code: string;
  message: string;
}

/** Faults, newest first, filtered by host and/or job. */
export async function faultHistory(
  store: Store,
  f: TimeRange & { host?: string; job?: string; limit?: number } = {},
): Promise<FaultRow[]> {
  const p: Record<string, unknown> = { limit: f.limit ?? 500 };
  const conds = timeFilter('ts', f, p);
  if (f.host !== undefined) {
    p.host = f.host;
    conds.push('host = {host:String}');
  }
  if (f.job !== undefined) {
    p.job = f.job;
    conds.push('job = {job:String}');
  }
  const rows = await store.query<Row>(
    `SELECT toUnixTimestamp64Milli(ts) AS t, host, gpu, job, rank, source, code, message
     FROM faults FINAL ${where(conds)} ORDER BY ts DESC, host LIMIT {limit:UInt32}`,
    p,
  );
  return rows.map((r) => ({
    ts: num(r.t),
    host: String(r.host),
    gpu: num(r.gpu),
    job: String(r.job),
    rank: num(r.rank),
    source: String(r.source),
    code: String(r.code),
    message: String(r.message),
  }));
}

export interface CheckpointStats {
  job: string;
  phase: string;
  count: number;
  failures: number;
  p50_ms: number;
  p95_ms: number;
  max_ms: number;
  /** Mean of successful durations: what Young/Daly interval choices use. */
  mean_ok_ms: number | null;
  /** Most ranks that took part in one save (or load). */
  ranks_max: number;
}

/** One checkpoint save or load of a job: all its ranks' events counted once. */
export interface CheckpointSave {
  job: string;
  phase: string;
  step: number;
  /** When the last rank finished (epoch ms). */
  ts: number;
  /** The slowest rank's duration: the job waits for it. */
  dur_ms: number;
  /** Ranks that reported it. */
  ranks: number;
  /** Every rank succeeded. */
  ok: boolean;
  bytes: number;
}

/** Ranks of one save may start this far apart (host clocks, a late barrier) and still be one save. */
const SAVE_TOLERANCE_MS = 60_000;

/**
 * Checkpoint events grouped into saves: every rank of a job sends one per save (the Python hook
 * runs on each rank), so rows of one job, phase and step whose time spans [ts - dur_ms, ts]
 * overlap (within SAVE_TOLERANCE_MS) are one save; the same step saved or loaded again after a
 * restart, minutes later, is another.
 */
function savesQuery(conds: string[]): string {
  const w = 'PARTITION BY job, phase, step ORDER BY start, end_ms';
  return `SELECT job, phase, step, max(end_ms) AS ts, max(dur_ms) AS dur_ms, uniqExact(rank) AS ranks,
      min(ok) AS ok, sum(bytes) AS bytes
    FROM (
      SELECT *, sum(first) OVER (${w} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS save
      FROM (
        SELECT *, toUInt8(count() OVER (${w} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) = 0
            OR start > max(end_ms) OVER (${w} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) + ${SAVE_TOLERANCE_MS}) AS first
        FROM (
          SELECT job, phase, step, rank, ok, bytes, dur_ms, toUnixTimestamp64Milli(ts) AS end_ms,
            end_ms - toInt64(greatest(dur_ms, 0)) AS start
          FROM checkpoints FINAL ${where(conds)}
        )
      )
    )
    GROUP BY job, phase, step, save`;
}

function jobAndTime(f: TimeRange & { job?: string }, p: Record<string, unknown>): string[] {
  const conds = timeFilter('ts', f, p);
  if (f.job !== undefined) {
    p.job = f.job;
    conds.push('job = {job:String}');
  }
  return conds;
}

/** Every checkpoint save and load in the range, oldest first, one row per save (not per rank). */
export async function checkpointSaves(
  store: Store,
  f: TimeRange & { job?: string } = {},
): Promise<CheckpointSave[]> {
  const p: Record<string, unknown> = {};
  const rows = await store.query<Row>(`${savesQuery(jobAndTime(f, p))} ORDER BY ts, job, phase, step`, p);
  return rows.map((r) => ({
    job: String(r.job),
    phase: String(r.phase),
    step: num(r.step),
    ts: num(r.ts),
    dur_ms: num(r.dur_ms),
    ranks: num(r.ranks),
    ok: num(r.ok) === 1,
    bytes: num(r.bytes),
  }));
}

export async function checkpointStats(
  store: Store,
  f: TimeRange & { job?: string } = {},
): Promise<CheckpointStats[]> {
  const p: Record<string, unknown> = {};
  const rows = await store.query<Row>(
    `SELECT job, phase, count() AS n, countIf(ok = 0) AS failures,
       quantileExact(0.5)(dur_ms) AS p50, quantileExact(0.95)(dur_ms) AS p95, max(dur_ms) AS mx,
       avgIf(dur_ms, ok = 1) AS mean_ok, max(ranks) AS ranks_max
     FROM (${savesQuery(jobAndTime(f, p))}) GROUP BY job, phase ORDER BY job, phase`,
    p,
  );
  return rows.map((r) => ({
    job: String(r.job),
    phase: String(r.phase),
    count: num(r.n),
    failures: num(r.failures),
    p50_ms: num(r.p50),
    p95_ms: num(r.p95),
    max_ms: num(r.mx),
    mean_ok_ms: r.mean_ok === null || Number.isNaN(Number(r.mean_ok)) ? null : Number(r.mean_ok),
    ranks_max: num(r.ranks_max),
  }));
}

export interface FailureCount {
  /** `fault`: a fault event (cause `source` or `source:code`); `interruption`: a job interrupted or
   * restarted (cause as reported); `checkpoint`: a failed checkpoint save or load. */
  kind: 'fault' | 'interruption' | 'checkpoint';
  cause: string;
  count: number;
}

/** Failure counts per cause, most frequent first: the inputs of MTBF and checkpoint-interval choices. */
export async function failureCounts(
  store: Store,
  f: TimeRange & { job?: string } = {},
): Promise<FailureCount[]> {
  const p: Record<string, unknown> = {};
  const jobCond = f.job === undefined ? [] : ['job = {job:String}'];
  if (f.job !== undefined) p.job = f.job;
  const t = timeFilter('ts', f, p);
  const rows = await store.query<Row>(
    `SELECT k AS kind, c AS cause, n AS count FROM (
       SELECT 'fault' AS k, if(code = '', source, concat(source, ':', code)) AS c, count() AS n
       FROM faults FINAL ${where([...jobCond, ...t])} GROUP BY c
       UNION ALL
       SELECT 'interruption' AS k, if(cause = '', event, cause) AS c, count() AS n
       FROM job_events FINAL ${where([...jobCond, ...t, "event IN ('interrupted', 'restart')"])} GROUP BY c
       UNION ALL
       SELECT 'checkpoint' AS k, concat(phase, '_failed') AS c, count() AS n
       FROM (${savesQuery([...jobCond, ...t])}) WHERE ok = 0 GROUP BY c
     ) ORDER BY n DESC, k, c`,
    p,
  );
  return rows.map((r) => ({
    kind: r.kind as FailureCount['kind'],
    cause: String(r.cause),
    count: num(r.count),
  }));
}

export interface GpuMinute {
  minute: number;
  gpu: number;
  sm_clock_mhz: number;
  sm_clock_min_mhz: number;
  temp_max_c: number;
  /** NVML reason bits seen in the minute, OR-ed. */
  throttle_reasons: number;
  /** Samples with a reason that matters (0x8, 0x20, 0x40, 0x80). */
  throttled_samples: number;
}

/** A host's GPU telemetry per minute, newest first: the throttling history of GET /v1/nodes/{host}. */
export async function gpuHistory(
  store: Store,
  host: string,
  f: TimeRange & { limit?: number } = {},
): Promise<GpuMinute[]> {
  const p: Record<string, unknown> = { host, limit: f.limit ?? 1000 };
  const rows = await store.query<Row>(
    `SELECT toUnixTimestamp64Milli(toDateTime64(minute, 3)) AS m, gpu, avgMerge(sm_clock_mhz) AS clk,
       min(sm_clock_min_mhz) AS clk_min, max(temp_max_c) AS temp, groupBitOr(throttle_reasons) AS reasons,
       countIfMerge(throttled_samples) AS throttled
     FROM gpu_minute ${where(['host = {host:String}', ...timeFilter('minute', f, p)])}
     GROUP BY minute, gpu ORDER BY minute DESC, gpu LIMIT {limit:UInt32}`,
    p,
  );
  return rows.map((r) => ({
    minute: num(r.m),
    gpu: num(r.gpu),
    sm_clock_mhz: num(r.clk),
    sm_clock_min_mhz: num(r.clk_min),
    temp_max_c: num(r.temp),
    throttle_reasons: num(r.reasons),
    throttled_samples: num(r.throttled),
  }));
}
