/**
 * Reads for researchers: what the interruption timelines, failure rates and checkpoint advice
 * need (job lifecycle, faults, saves, hosts, minutes with steps), and the two reports an API
 * route or the CLI calls: `failuresReport` and `jobCheckpointAdvice`. Same rules as queries.ts:
 * bound parameters only, times as epoch ms.
 */
import { collapseSaves, minuteSpans } from '../analytics/from-events.js';
import {
  type FaultRow,
  type JobRecord,
  type JobTimeline,
  jobTimeline,
  type LifecycleRow,
  type SaveRow,
  TIMELINE_DEFAULTS,
} from '../analytics/interruptions.js';
import { type JobAdvice, jobAdvice, type Overrides } from '../analytics/job-advice.js';
import { type FailureReport, failureRates, type RateBy } from '../analytics/rates.js';
import { type TimeRange, timeFilter, where } from './queries.js';
import type { Store } from './store.js';

type Row = Record<string, string | number | null>;
const num = (v: unknown) => (v === null || v === undefined ? 0 : Number(v));

function jobCond(job: string | undefined, p: Record<string, unknown>): string[] {
  if (job === undefined) return [];
  p.job = job;
  return ['job = {job:String}'];
}

export async function lifecycleRows(
  store: Store,
  f: TimeRange & { job?: string } = {},
): Promise<LifecycleRow[]> {
  const p: Record<string, unknown> = {};
  const rows = await store.query<Row>(
    `SELECT toUnixTimestamp64Milli(ts) AS t, job, event, cause, world_size, gpu_model
     FROM job_events FINAL ${where([...jobCond(f.job, p), ...timeFilter('ts', f, p)])} ORDER BY job, ts`,
    p,
  );
  return rows.map((r) => ({
    ts: num(r.t),
    job: String(r.job),
    event: String(r.event),
    cause: String(r.cause ?? ''),
    world_size: num(r.world_size),
    gpu_model: String(r.gpu_model ?? ''),
  }));
}

/**
 * Checkpoint saves, one row per save: rows are grouped by (job, step), so a save reported by every
 * rank counts once (its slowest rank's duration, ok only if all were ok) and a save reported once
 * stays one. The one place saves are read: adapt it if the counting of saves changes.
 */
export async function checkpointSaves(
  store: Store,
  f: TimeRange & { job?: string } = {},
): Promise<SaveRow[]> {
  const p: Record<string, unknown> = {};
  const rows = await store.query<Row>(
    `SELECT job, step, toUnixTimestamp64Milli(max(ts)) AS t, max(dur_ms) AS dur, min(ok) AS ok
     FROM checkpoints FINAL ${where(["phase = 'save'", ...jobCond(f.job, p), ...timeFilter('ts', f, p)])}
     GROUP BY job, step ORDER BY t`,
    p,
  );
  return collapseSaves(
    rows.map((r) => ({
      ts: num(r.t),
      job: String(r.job),
      step: num(r.step),
      dur_ms: num(r.dur),
      ok: num(r.ok) === 1,
    })),
  );
}

export async function faultRows(store: Store, f: TimeRange = {}): Promise<FaultRow[]> {
  const p: Record<string, unknown> = {};
  const rows = await store.query<Row>(
    `SELECT toUnixTimestamp64Milli(ts) AS t, host, gpu, job, source, code, message
     FROM faults FINAL ${where(timeFilter('ts', f, p))} ORDER BY ts`,
    p,
  );
  return rows.map((r) => ({
    ts: num(r.t),
    host: String(r.host),
    gpu: num(r.gpu),
    job: String(r.job),
    source: String(r.source),
    code: String(r.code ?? ''),
    message: String(r.message ?? ''),
  }));
}

/** Hosts per job: from the job event's `hosts` (raw events) and from the hosts that reported steps. */
export async function jobHosts(store: Store, jobs: string[]): Promise<Map<string, string[]>> {
  const out = new Map<string, Set<string>>();
  if (!jobs.length) return new Map();
  const add = (rows: Row[]) => {
    for (const r of rows) {
      const s = out.get(String(r.job)) ?? new Set<string>();
      for (const h of r.hosts as unknown as string[]) if (h) s.add(h);
      out.set(String(r.job), s);
    }
  };
  add(
    await store.query<Row>(
      `SELECT job, arrayDistinct(arrayFlatten(groupArray(JSONExtract(raw, 'hosts', 'Array(String)')))) AS hosts
       FROM events WHERE kind = 'job' AND job IN {jobs:Array(String)} GROUP BY job`,
      { jobs },
    ),
  );
  add(
    await store.query<Row>(
      `SELECT job, groupUniqArray(host) AS hosts FROM rank_minute WHERE job IN {jobs:Array(String)} GROUP BY job`,
      { jobs },
    ),
  );
  return new Map([...out].map(([k, v]) => [k, [...v].sort()]));
}

/** Minutes in which the job made steps (from the job_minute rollup). */
export async function stepMinutes(store: Store, job: string, f: TimeRange = {}): Promise<number[]> {
  const p: Record<string, unknown> = { job };
  const rows = await store.query<Row>(
    `SELECT DISTINCT toUnixTimestamp(minute) AS m FROM job_minute
     ${where(['job = {job:String}', ...timeFilter('minute', f, p)])} ORDER BY m`,
    p,
  );
  return rows.map((r) => num(r.m) / 60);
}

/** Every job seen in the lifecycle table in the range (or one job), with all it needs for a timeline. */
export async function jobRecords(store: Store, f: TimeRange & { job?: string } = {}): Promise<JobRecord[]> {
  const life = await lifecycleRows(store, f);
  const jobs = [...new Set(life.map((r) => r.job))];
  const saves = await checkpointSaves(store, f);
  // Faults from a little before the range, so the first interruption can still be attributed.
  const faults = await faultRows(store, {
    from: f.from === undefined ? undefined : f.from - TIMELINE_DEFAULTS.attributionWindowMs,
    to: f.to,
  });
  const hosts = await jobHosts(store, jobs);
  const out: JobRecord[] = [];
  for (const job of jobs) {
    const hs = hosts.get(job) ?? [];
    const set = new Set(hs);
    out.push({
      job,
      lifecycle: life.filter((r) => r.job === job),
      saves: saves.filter((s) => s.job === job),
      faults: faults.filter((x) => x.job === job || set.has(x.host)),
      hosts: hs,
      activity: minuteSpans(await stepMinutes(store, job, f)),
    });
  }
  return out;
}

export interface FailuresQuery extends TimeRange {
  by?: RateBy;
  /** Job size for the MTBF (default: the largest job recorded). */
  gpus?: number;
  /** Event time that closes jobs still running (default: now). */
  now?: number;
}

export interface FailuresResult extends FailureReport {
  timelines: JobTimeline[];
}

/** Failure rates per cause/group/host/GPU model with exact intervals, MTBF for N GPUs, and each job's timeline. */
export async function failuresReport(store: Store, q: FailuresQuery = {}): Promise<FailuresResult> {
  const now = q.now ?? Date.now();
  const timelines = (await jobRecords(store, q)).map((r) => jobTimeline(r, now));
  return { ...failureRates(timelines, q.by ?? 'cause', q.gpus), timelines };
}

export interface JobAdviceResult extends JobAdvice {
  timeline: JobTimeline;
  /** The fleet's rates, read only when the job has no interruption of its own (else null). */
  fleet: FailureReport | null;
}

/** Checkpoint advice for one job from its own record (fleet rate as fallback); null if the job is unknown. */
export async function jobCheckpointAdvice(
  store: Store,
  job: string,
  opts: TimeRange & { now?: number; given?: Overrides } = {},
): Promise<JobAdviceResult | null> {
  const now = opts.now ?? Date.now();
  const [rec] = await jobRecords(store, { ...opts, job });
  if (!rec) return null;
  const timeline = jobTimeline(rec, now);
  // Reading every job is the expensive part: only when the job's own failures cannot give a rate.
  const needFleet = timeline.interruptions.length === 0 && opts.given?.mtbfS === undefined;
  const fleet = needFleet
    ? failureRates(
        (await jobRecords(store, { from: opts.from, to: opts.to })).map((r) => jobTimeline(r, now)),
        'cause',
        timeline.gpus || undefined,
      )
    : null;
  return { ...jobAdvice(timeline, rec.saves, fleet ?? undefined, opts.given), timeline, fleet };
}
