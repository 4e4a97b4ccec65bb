/**
 * Job records straight from v1 events (a recorded or simulated file), the same shapes the store
 * reads return: lifecycle rows, faults, one row per save, hosts and minutes with steps.
 */
import type { RankwatchEvent } from '../schema/events.js';
import type { ActivitySpan, FaultRow, JobRecord, LifecycleRow, SaveRow } from './interruptions.js';

/**
 * One save per (job, step): a save reported by every rank counts once, with its slowest duration
 * (the job waits for the last rank) and ok only if every rank's part was.
 */
export function collapseSaves(rows: SaveRow[]): SaveRow[] {
  const by = new Map<string, SaveRow>();
  for (const r of rows) {
    const k = `${r.job}\u0000${r.step}`;
    const s = by.get(k);
    if (!s) by.set(k, { ...r });
    else {
      s.ts = Math.max(s.ts, r.ts);
      s.dur_ms = Math.max(s.dur_ms, r.dur_ms);
      s.ok = s.ok && r.ok;
    }
  }
  return [...by.values()].sort((a, b) => a.ts - b.ts);
}

export function recordsFromEvents(events: Iterable<RankwatchEvent>): JobRecord[] {
  const jobs = new Map<string, JobRecord & { minutes: Set<number>; rawSaves: SaveRow[] }>();
  const faults: FaultRow[] = [];
  const get = (job: string) => {
    let r = jobs.get(job);
    if (!r) {
      r = { job, lifecycle: [], faults: [], saves: [], hosts: [], minutes: new Set(), rawSaves: [] };
      jobs.set(job, r);
    }
    return r;
  };
  for (const e of events) {
    switch (e.kind) {
      case 'job': {
        const r = get(e.job);
        r.lifecycle.push(row(e.ts, e.job, 'config', '', e.world_size, e.gpu_model));
        if (e.hosts?.length) r.hosts = [...new Set([...r.hosts, ...e.hosts])];
        break;
      }
      case 'job_event':
        get(e.job).lifecycle.push(row(e.ts, e.job, e.event, e.cause ?? '', -1, ''));
        break;
      case 'checkpoint':
        if (e.phase === 'save')
          get(e.job).rawSaves.push({ ts: e.ts, job: e.job, step: e.step, dur_ms: e.dur_ms, ok: e.ok });
        break;
      case 'fault':
        faults.push({
          ts: e.ts,
          host: e.host,
          gpu: e.gpu ?? -1,
          job: e.job ?? '',
          source: e.source,
          code: e.code === undefined ? '' : String(e.code),
          message: e.message,
        });
        break;
      case 'step':
        get(e.job).minutes.add(Math.floor(e.ts / 60_000));
        break;
      default:
        break;
    }
  }
  return [...jobs.values()].map(({ minutes, rawSaves, ...r }) => {
    const hosts = new Set(r.hosts);
    return {
      ...r,
      saves: collapseSaves(rawSaves),
      faults: faults.filter((f) => f.job === r.job || hosts.has(f.host)),
      activity: minuteSpans([...minutes]),
    };
  });
}

/** Minutes with steps as spans [minute, minute + 1 min). */
export function minuteSpans(minutes: number[]): ActivitySpan[] {
  return minutes.sort((a, b) => a - b).map((m) => ({ from: m * 60_000, to: (m + 1) * 60_000 }));
}

const row = (
  ts: number,
  job: string,
  event: string,
  cause: string,
  world: number,
  model: string,
): LifecycleRow => ({
  ts,
  job,
  event,
  cause,
  world_size: world,
  gpu_model: model,
});
