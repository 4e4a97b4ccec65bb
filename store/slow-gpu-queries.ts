/**
 * The slowest GPUs: each job's latest ranking as the straggler detector handed it out (the
 * `slow_gpus` table), and the fleet's, one row per GPU. Same rules as queries.ts: bound parameters,
 * times as epoch ms.
 */
import type { SlowGpu } from '../schema/output.js';
import { type TimeRange, timeFilter, where } from './queries.js';
import type { Store } from './store.js';

type Row = Record<string, string | number | null>;

const COLUMNS = `toUnixTimestamp64Milli(ts) AS ts_ms, job, step, rank, host, gpu, stage, slowdown_pct, cost_pct,
  gpu_hours_per_day, steps`;

function slowGpu(r: Row): SlowGpu {
  return {
    job: String(r.job),
    ts: Number(r.ts_ms),
    step: Number(r.step),
    rank: Number(r.rank),
    host: String(r.host),
    gpu: Number(r.gpu),
    stage: Number(r.stage),
    slowdown_pct: Number(r.slowdown_pct),
    cost_pct: Number(r.cost_pct),
    gpu_hours_per_day: Number(r.gpu_hours_per_day),
    steps: Number(r.steps),
  };
}

/**
 * A job's slowest GPUs: its latest ranking, the GPU the job waits for first (by what replacing it
 * would buy), then by how much slower than its stage peers each runs. Empty when none was stored.
 */
export async function jobSlowGpus(store: Store, job: string, limit = 16): Promise<SlowGpu[]> {
  const rows = await store.query<Row>(
    `SELECT ${COLUMNS} FROM slow_gpus FINAL
     WHERE job = {job:String} AND ts = (SELECT max(ts) FROM slow_gpus WHERE job = {job:String})
     ORDER BY round(cost_pct, 1) DESC, slowdown_pct DESC, rank LIMIT {limit:UInt32}`,
    { job, limit: Math.max(1, Math.floor(limit)) },
  );
  return rows.map(slowGpu);
}

/** A GPU of the fleet's ranking: its figures in the latest job that ranked it, and how many jobs did. */
export interface FleetSlowGpu extends SlowGpu {
  /** Jobs in the range whose latest ranking lists this GPU. */
  jobs: number;
}

/**
 * The fleet's slowest GPUs over the range (default: the last 7 days): every GPU in the latest
 * ranking of any job that ran in it, one row per host and GPU with its figures from the most recent
 * such job, ranked by the GPU-hours a day it costs (its cost scaled by its job's size, so jobs of
 * different sizes compare), then by how much slower than its peers it runs.
 */
export async function fleetSlowGpus(
  store: Store,
  opts: TimeRange & { now?: number; limit?: number } = {},
): Promise<FleetSlowGpu[]> {
  const now = opts.now ?? Date.now();
  const params: Record<string, unknown> = { limit: Math.max(1, Math.floor(opts.limit ?? 50)) };
  const range = timeFilter('ts', { from: opts.from ?? now - 7 * 86_400_000, to: opts.to }, params);
  // Aliases differ from the columns: ClickHouse reads an alias wherever its name appears.
  const rows = await store.query<Row>(
    `SELECT host, gpu, uniqExact(job) AS jobs, toUnixTimestamp64Milli(max(ts)) AS ts_ms,
       argMax(job, ts) AS l_job, argMax(step, ts) AS l_step, argMax(rank, ts) AS l_rank,
       argMax(stage, ts) AS l_stage, argMax(slowdown_pct, ts) AS l_slowdown, argMax(cost_pct, ts) AS l_cost,
       argMax(gpu_hours_per_day, ts) AS l_hours, argMax(steps, ts) AS l_steps
     FROM slow_gpus FINAL
     WHERE (job, ts) IN (SELECT job, max(ts) FROM slow_gpus ${where(range)} GROUP BY job)
     GROUP BY host, gpu
     ORDER BY round(l_hours, 1) DESC, l_slowdown DESC, host, gpu LIMIT {limit:UInt32}`,
    params,
  );
  return rows.map((r) => ({
    ...slowGpu({
      ...r,
      job: r.l_job,
      step: r.l_step,
      rank: r.l_rank,
      stage: r.l_stage,
      slowdown_pct: r.l_slowdown,
      cost_pct: r.l_cost,
      gpu_hours_per_day: r.l_hours,
      steps: r.l_steps,
    }),
    jobs: Number(r.jobs),
  }));
}
