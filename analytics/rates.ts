/**
 * Failure rates from job timelines: counts of interruptions over the exposure in which they could
 * happen (GPU-hours and node-days while jobs were up), per cause, group, host, GPU model or for the
 * fleet, with exact Poisson 95% intervals; and the MTBF a job of N GPUs can expect.
 */
import { CAUSE_GROUPS, causeGroup } from './causes.js';
import type { JobTimeline } from './interruptions.js';
import { FEW_EVENTS, type RateEstimate, rateWithInterval } from './poisson.js';

export type RateBy = 'cause' | 'group' | 'host' | 'gpu_model';
export const RATE_BY: RateBy[] = ['cause', 'group', 'host', 'gpu_model'];

/** GPUs per node assumed when a job did not list its hosts. */
export const DEFAULT_GPUS_PER_NODE = 8;

export interface RateRow {
  key: string;
  /** The coarse group of a cause row. */
  group?: string;
  count: number;
  gpu_hours: number;
  node_days: number;
  per_1k_node_days: RateEstimate | null;
  per_1m_gpu_hours: RateEstimate | null;
  /** Fewer events than FEW_EVENTS: the interval is printed but too wide to act on. */
  few: boolean;
}

export interface Mtbf {
  gpus: number;
  /** Hours; `hi` is null when no failure was recorded (the MTBF is at least `lo`). */
  hours: number | null;
  lo: number;
  hi: number | null;
}

export interface FailureReport {
  by: RateBy;
  fleet: RateRow;
  rows: RateRow[];
  jobs: number;
  mtbf: Mtbf | null;
  notes: string[];
}

const H = 3_600_000;
const D = 86_400_000;

function nodesOf(t: JobTimeline): number {
  return t.hosts.length || Math.max(1, Math.ceil(t.gpus / DEFAULT_GPUS_PER_NODE));
}

function row(key: string, count: number, gpuHours: number, nodeDays: number): RateRow {
  return {
    key,
    count,
    gpu_hours: gpuHours,
    node_days: nodeDays,
    per_1k_node_days: rateWithInterval(count, nodeDays, 1000),
    per_1m_gpu_hours: rateWithInterval(count, gpuHours, 1e6),
    few: count < FEW_EVENTS,
  };
}

/** MTBF for a job of `gpus` GPUs from a fleet rate per GPU-hour (exposure in GPU-hours). */
export function mtbfForGpus(count: number, gpuHours: number, gpus: number): Mtbf | null {
  const r = rateWithInterval(count, gpuHours, 1);
  if (!r || !(gpus > 0)) return null;
  return {
    gpus,
    hours: r.rate > 0 ? 1 / (gpus * r.rate) : null,
    lo: 1 / (gpus * r.hi),
    hi: r.lo > 0 ? 1 / (gpus * r.lo) : null,
  };
}

export function failureRates(timelines: JobTimeline[], by: RateBy, gpusForMtbf?: number): FailureReport {
  const notes: string[] = [];
  let gpuH = 0;
  let nodeD = 0;
  let total = 0;
  for (const t of timelines) {
    gpuH += (t.gpus * t.up_ms) / H;
    nodeD += (nodesOf(t) * t.up_ms) / D;
    total += t.interruptions.length;
    if (!t.hosts.length && t.gpus > 0)
      notes.push(
        `${t.job}: hosts not recorded, ${DEFAULT_GPUS_PER_NODE} GPUs per node assumed for node-days`,
      );
    if (!t.gpus) notes.push(`${t.job}: world size not recorded, so it adds no GPU-hours`);
  }
  const fleet = row('fleet', total, gpuH, nodeD);
  let rows: RateRow[] = [];
  if (by === 'cause' || by === 'group') {
    const counts = new Map<string, number>();
    if (by === 'group') for (const g of CAUSE_GROUPS) counts.set(g, 0);
    for (const t of timelines)
      for (const i of t.interruptions) {
        const k = by === 'cause' ? i.cause : i.group;
        counts.set(k, (counts.get(k) ?? 0) + 1);
      }
    rows = [...counts].map(([k, n]) => ({
      ...row(k, n, gpuH, nodeD),
      ...(by === 'cause' ? { group: causeGroup(k) } : {}),
    }));
  } else if (by === 'host') {
    const exp = new Map<string, { n: number; gpuH: number; nodeD: number }>();
    let noHost = 0;
    for (const t of timelines) {
      const perNode = t.gpus / nodesOf(t);
      for (const h of t.hosts) {
        const e = exp.get(h) ?? { n: 0, gpuH: 0, nodeD: 0 };
        e.gpuH += (perNode * t.up_ms) / H;
        e.nodeD += t.up_ms / D;
        exp.set(h, e);
      }
      for (const i of t.interruptions) {
        if (!i.host) {
          noHost++;
          continue;
        }
        const e = exp.get(i.host) ?? { n: 0, gpuH: 0, nodeD: 0 };
        e.n++;
        exp.set(i.host, e);
      }
    }
    if (noHost)
      notes.push(
        `${noHost} interruption(s) name no host (no fault on the job's hosts near them): left out of per-host rows`,
      );
    rows = [...exp].map(([k, e]) => row(k, e.n, e.gpuH, e.nodeD));
  } else {
    const exp = new Map<string, { n: number; gpuH: number; nodeD: number }>();
    for (const t of timelines) {
      const k = t.gpu_model || 'unknown';
      const e = exp.get(k) ?? { n: 0, gpuH: 0, nodeD: 0 };
      e.n += t.interruptions.length;
      e.gpuH += (t.gpus * t.up_ms) / H;
      e.nodeD += (nodesOf(t) * t.up_ms) / D;
      exp.set(k, e);
    }
    rows = [...exp].map(([k, e]) => row(k, e.n, e.gpuH, e.nodeD));
  }
  rows.sort((a, b) => b.count - a.count || (a.key < b.key ? -1 : 1));
  const largest = Math.max(0, ...timelines.map((t) => t.gpus));
  const n = gpusForMtbf ?? largest;
  if (fleet.few)
    notes.push(
      `only ${total} interruption(s) recorded: the intervals are wide; they are printed all the same`,
    );
  return {
    by,
    fleet,
    rows,
    jobs: timelines.length,
    mtbf: n > 0 ? mtbfForGpus(total, gpuH, n) : null,
    notes: [...new Set(notes)],
  };
}
