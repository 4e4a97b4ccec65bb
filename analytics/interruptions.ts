/**
 * A job's interruptions, from what was recorded: job_event interrupted/restart (and, when those
 * are missing, a gap in the job's steps), each with its cause, what it cost and the job's
 * effective training time ratio (ETTR, goodput share of wall time). Pure: rows in, figures out.
 *
 * Time lost to one interruption = rework (failure − last completed save) + downtime (restart −
 * failure). Saves are taken as finishing at their `ts`, with the saved state as of `ts − dur`.
 */
import { type CauseGroup, causeGroup, causeOfFault, normalizeCause } from './causes.js';

export interface LifecycleRow {
  ts: number;
  job: string;
  /** `config` (the job event), `start`, `restart`, `interrupted`, `finished`. */
  event: string;
  cause: string;
  world_size: number;
  gpu_model: string;
}

export interface FaultRow {
  ts: number;
  host: string;
  gpu: number;
  job: string;
  source: string;
  code: string;
  message: string;
}

/** One checkpoint save (one row per save, whatever the number of ranks that reported it). */
export interface SaveRow {
  ts: number;
  job: string;
  step: number;
  dur_ms: number;
  ok: boolean;
}

/** Half-open spans of time in which the job made steps (e.g. minutes of the job_minute rollup). */
export interface ActivitySpan {
  from: number;
  to: number;
}

export interface Interruption {
  ts: number;
  /** When training ran again; null if it never did in what was recorded. */
  restart_ts: number | null;
  cause: string;
  group: CauseGroup;
  /** Where the cause came from: the job_event's cause, the closest fault on the job's hosts, or none. */
  cause_from: 'job_event' | 'fault' | 'none';
  host?: string;
  gpu?: number;
  /** `job_event`: recorded; `step_gap`: inferred from steps that stopped and restarted. */
  seen_from: 'job_event' | 'step_gap';
  last_save_ts: number | null;
  rework_ms: number;
  down_ms: number | null;
  lost_ms: number;
}

export interface JobTimeline {
  job: string;
  gpus: number;
  gpu_model: string;
  hosts: string[];
  start_ts: number;
  end_ts: number;
  /** Wall time the job was up (from start/restart to interruption or end). */
  up_ms: number;
  interruptions: Interruption[];
  saves: number;
  save_ms: number;
  /** Share of wall time spent on training that was kept: 1 − (lost + blocking saves) / wall. */
  ettr: number | null;
  notes: string[];
}

export interface TimelineConfig {
  /** How far before an interruption a fault may be and still be its cause. */
  attributionWindowMs: number;
  /** A fault logged this long after the interruption still counts (clocks and log shippers lag). */
  attributionSkewMs: number;
  /** A pause in steps longer than this, with no recorded interruption, is an inferred one. */
  stepGapMs: number;
}

export const TIMELINE_DEFAULTS: TimelineConfig = {
  attributionWindowMs: 10 * 60_000,
  attributionSkewMs: 30_000,
  stepGapMs: 10 * 60_000,
};

export interface JobRecord {
  job: string;
  lifecycle: LifecycleRow[];
  faults: FaultRow[];
  saves: SaveRow[];
  hosts: string[];
  activity?: ActivitySpan[];
}

/** The job's interruptions and ETTR; `now` closes a job that has not finished. */
export function jobTimeline(
  rec: JobRecord,
  now: number,
  cfg: TimelineConfig = TIMELINE_DEFAULTS,
): JobTimeline {
  const notes: string[] = [];
  const life = [...rec.lifecycle].sort((a, b) => a.ts - b.ts);
  const config = life.filter((r) => r.event === 'config');
  const gpus = Math.max(0, ...life.map((r) => r.world_size));
  const gpuModel =
    config.find((r) => r.gpu_model)?.gpu_model ?? life.find((r) => r.gpu_model)?.gpu_model ?? '';
  const saves = rec.saves.filter((s) => s.ok).sort((a, b) => a.ts - b.ts);
  const activity = [...(rec.activity ?? [])].sort((a, b) => a.from - b.from);
  const firstSeen = Math.min(
    ...life.map((r) => r.ts),
    ...activity.map((a) => a.from),
    ...saves.map((s) => s.ts - s.dur_ms),
  );
  const start = life.find((r) => r.event === 'start')?.ts ?? firstSeen;
  const finished = life.filter((r) => r.event === 'finished').at(-1)?.ts;
  const lastSeen = Math.max(
    ...life.map((r) => r.ts),
    ...activity.map((a) => a.to),
    ...saves.map((s) => s.ts),
  );
  const end = finished ?? Math.max(lastSeen, Math.min(now, lastSeen + cfg.stepGapMs));
  if (!Number.isFinite(start)) {
    return {
      job: rec.job,
      gpus,
      gpu_model: gpuModel,
      hosts: rec.hosts,
      start_ts: 0,
      end_ts: 0,
      up_ms: 0,
      interruptions: [],
      saves: 0,
      save_ms: 0,
      ettr: null,
      notes: ['nothing recorded for this job'],
    };
  }

  // Recorded interruptions: each `interrupted`, paired with the next restart; a restart with no
  // interruption before it is an interruption whose time is only known as the restart.
  const found: { ts: number; restart: number | null; cause: string; seen: Interruption['seen_from'] }[] = [];
  let open: (typeof found)[number] | undefined;
  for (const r of life) {
    if (r.event === 'interrupted') {
      if (open) found.push(open);
      open = { ts: r.ts, restart: null, cause: r.cause, seen: 'job_event' };
    } else if (r.event === 'restart') {
      if (open) {
        open.restart = r.ts;
        if (!open.cause && r.cause) open.cause = r.cause;
        found.push(open);
        open = undefined;
      } else {
        found.push({ ts: r.ts, restart: r.ts, cause: r.cause, seen: 'job_event' });
        notes.push(
          `restart at ${iso(r.ts)} has no interruption before it: its downtime is unknown (0 counted)`,
        );
      }
    }
  }
  if (open) found.push(open);
  // Inferred: gaps in step activity that no recorded interruption explains.
  for (let i = 1; i < activity.length; i++) {
    const from = activity[i - 1].to;
    const to = activity[i].from;
    if (to - from <= cfg.stepGapMs) continue;
    if (found.some((f) => f.ts <= to && (f.restart ?? Number.POSITIVE_INFINITY) >= from)) continue;
    found.push({ ts: from, restart: to, cause: '', seen: 'step_gap' });
  }
  found.sort((a, b) => a.ts - b.ts);

  const hosts = new Set(rec.hosts);
  const interruptions: Interruption[] = found.map((f, k) => {
    let cause = normalizeCause(f.cause);
    let from: Interruption['cause_from'] = cause ? 'job_event' : 'none';
    const fault = closestFault(rec, hosts, f.ts, cfg);
    if (!cause && fault) {
      cause = causeOfFault(fault.source, fault.code);
      from = 'fault';
    }
    if (!cause) cause = 'unknown';
    const last = lastBefore(saves, f.ts);
    // Work redone is what ran since the later of the last save and the previous restart: work
    // before that restart was already counted against the previous interruption.
    const prevRestart = k > 0 ? (found[k - 1].restart ?? start) : start;
    const rework = f.ts - Math.max(last?.ts ?? start, prevRestart);
    const down = f.restart === null ? null : Math.max(0, f.restart - f.ts);
    return {
      ts: f.ts,
      restart_ts: f.restart,
      cause,
      group: causeGroup(cause),
      cause_from: from,
      ...(fault ? { host: fault.host, gpu: fault.gpu } : {}),
      seen_from: f.seen,
      last_save_ts: last?.ts ?? null,
      rework_ms: Math.max(0, rework),
      down_ms: down,
      lost_ms: Math.max(0, rework) + (down ?? Math.max(0, end - f.ts)),
    };
  });
  if (interruptions.some((i) => i.last_save_ts === null))
    notes.push('an interruption came before any completed save: its rework is counted from the job start');

  // Up time: wall time minus downtime (and minus the tail after an interruption never restarted).
  const wall = Math.max(0, end - start);
  let down = 0;
  for (const i of interruptions) down += i.restart_ts === null ? Math.max(0, end - i.ts) : (i.down_ms ?? 0);
  const upMs = Math.max(0, wall - down);
  const saveMs = saves.filter((s) => s.ts >= start && s.ts <= end).reduce((t, s) => t + s.dur_ms, 0);
  const lost = interruptions.reduce((t, i) => t + i.lost_ms, 0);
  const ettr = wall > 0 ? Math.max(0, 1 - (lost + saveMs) / wall) : null;
  if (wall > 0 && lost + saveMs > wall)
    notes.push(
      'time lost and saves add up to more than the wall time: a save duration or an event time is likely wrong',
    );
  return {
    job: rec.job,
    gpus,
    gpu_model: gpuModel,
    hosts: rec.hosts,
    start_ts: start,
    end_ts: end,
    up_ms: upMs,
    interruptions,
    saves: saves.length,
    save_ms: saveMs,
    ettr,
    notes,
  };
}

/** The fault on the job (or its hosts) closest before `ts` within the window (small skew allowed after). */
function closestFault(
  rec: JobRecord,
  hosts: Set<string>,
  ts: number,
  cfg: TimelineConfig,
): FaultRow | undefined {
  let best: FaultRow | undefined;
  for (const f of rec.faults) {
    if (f.job !== rec.job && !hosts.has(f.host)) continue;
    if (f.ts < ts - cfg.attributionWindowMs || f.ts > ts + cfg.attributionSkewMs) continue;
    if (!best || Math.abs(f.ts - ts) < Math.abs(best.ts - ts)) best = f;
  }
  return best;
}

function lastBefore(saves: SaveRow[], ts: number): SaveRow | undefined {
  let last: SaveRow | undefined;
  for (const s of saves) {
    if (s.ts > ts) break;
    last = s;
  }
  return last;
}

const iso = (ms: number) => new Date(ms).toISOString();
