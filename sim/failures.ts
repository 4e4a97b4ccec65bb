/**
 * A failure process for fleets and jobs, without per-step events: every node fails as a Poisson
 * process with a cause mix; a synchronous job stops when any of its nodes fails, restarts after
 * `restartS`, and resumes from its last completed save. Saves block for `saveS` after every
 * `intervalS` of compute. Seeded and deterministic.
 *
 * One job's failures are the superposition of its nodes' processes: while it is up, the time to the
 * next failure is exponential with rate nodes × per-node rate, on a node drawn uniformly, with a
 * cause drawn by weight. That is the same process as drawing each node's failures separately
 * (Poisson superposition), at a cost independent of the fleet's size. Nodes do not fail while the
 * job is down (the rates are per time up, as the analytics count exposure).
 */
import { Random } from '../core/random.js';
import type { RankwatchEvent } from '../schema/events.js';
import { LLAMA3_RUN, LLAMA3_TABLE5 } from './failure-mix.js';
import { hostName } from './topology.js';

export interface CauseWeight {
  cause: string;
  weight: number;
}

export interface FailureSimOptions {
  seed?: number;
  startTs?: number;
  /** Nodes in the fleet, split evenly into `jobs` jobs. */
  nodes?: number;
  gpusPerNode?: number;
  jobs?: number;
  days?: number;
  gpuModel?: string;
  /** Failures per node per day of uptime, all causes together. */
  ratePerNodeDay?: number;
  causes?: CauseWeight[];
  /** Compute seconds between saves. */
  intervalS?: number;
  saveS?: number;
  restartS?: number;
  /** Put the cause on the `interrupted` job_event (else only the fault event tells it). */
  causeOnEvent?: boolean;
  jobPrefix?: string;
}

const LLAMA3_NODES = LLAMA3_RUN.gpus / LLAMA3_RUN.gpusPerHost;

export const FAILURE_SIM_DEFAULTS = {
  seed: 1,
  startTs: Date.UTC(2026, 0, 1),
  nodes: LLAMA3_NODES,
  gpusPerNode: LLAMA3_RUN.gpusPerHost,
  jobs: 1,
  days: 7,
  gpuModel: 'H100-SXM',
  /** Llama 3's rate: 419 interruptions / (2,048 nodes × 54 days). */
  ratePerNodeDay: LLAMA3_RUN.interruptions / (LLAMA3_NODES * LLAMA3_RUN.days),
  causes: LLAMA3_TABLE5.map((c) => ({ cause: c.cause, weight: c.count })),
  intervalS: 1800,
  saveS: 30,
  restartS: 600,
  causeOnEvent: true,
  jobPrefix: 'fleet',
};

type Opts = typeof FAILURE_SIM_DEFAULTS;

/** What a fault event looks like for a cause, so analytics can attribute it when the job_event has none. */
export function faultFor(cause: string): { source: string; code?: number | string; message: string } {
  const c = cause.toLowerCase();
  if (/hbm|sram|ecc/.test(c)) return { source: 'xid', code: 48, message: `Double Bit ECC Error (${cause})` };
  if (/system memory/.test(c)) return { source: 'ecc', message: `host memory error (${cause})` };
  if (/gpu|silent data/.test(c))
    return { source: 'xid', code: 79, message: `GPU has fallen off the bus (${cause})` };
  if (/nccl/.test(c))
    return { source: 'nccl_timeout', message: `Watchdog caught collective operation timeout (${cause})` };
  if (/nic|network|switch|cable/.test(c)) return { source: 'link', message: `link down (${cause})` };
  if (/software|dependency|bug/.test(c))
    return { source: 'exit', code: 1, message: `training process exited (${cause})` };
  return { source: 'host', message: cause };
}

export interface FailureTruth {
  /** Per cause: the simulated rate per node-day and per GPU-hour (of uptime). */
  causes: { cause: string; per_node_day: number; per_gpu_hour: number }[];
  per_node_day: number;
  per_gpu_hour: number;
  /** MTBF of one job, hours of uptime. */
  job_mtbf_h: number;
  jobs: { job: string; nodes: number; gpus: number; failures: number; up_ms: number }[];
}

export class FailureSim {
  readonly opts: Opts;

  constructor(options: FailureSimOptions = {}) {
    const o = {
      ...FAILURE_SIM_DEFAULTS,
      ...Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)),
    } as Opts;
    if (!(o.nodes >= 1 && o.jobs >= 1 && o.jobs <= o.nodes))
      throw new Error(`failure sim: need 1 ≤ jobs (${o.jobs}) ≤ nodes (${o.nodes})`);
    if (!(o.ratePerNodeDay >= 0) || !(o.days > 0))
      throw new Error('failure sim: need a rate ≥ 0 and days > 0');
    if (!o.causes.length || o.causes.some((c) => !(c.weight >= 0)))
      throw new Error('failure sim: need causes with weights ≥ 0');
    this.opts = o;
  }

  truth(): FailureTruth {
    const o = this.opts;
    const w = o.causes.reduce((s, c) => s + c.weight, 0);
    const perNode = Math.floor(o.nodes / o.jobs);
    return {
      causes: o.causes.map((c) => ({
        cause: c.cause,
        per_node_day: (o.ratePerNodeDay * c.weight) / w,
        per_gpu_hour: (o.ratePerNodeDay * c.weight) / w / o.gpusPerNode / 24,
      })),
      per_node_day: o.ratePerNodeDay,
      per_gpu_hour: o.ratePerNodeDay / o.gpusPerNode / 24,
      job_mtbf_h: 24 / (o.ratePerNodeDay * perNode),
      jobs: [],
    };
  }

  /** Every event of every job, in event-time order. */
  events(): RankwatchEvent[] {
    const o = this.opts;
    const perJob = Math.floor(o.nodes / o.jobs);
    const all: RankwatchEvent[] = [];
    for (let j = 0; j < o.jobs; j++) {
      const hosts = Array.from({ length: perJob }, (_, i) => hostName(j * perJob + i));
      all.push(...this.jobEvents(`${o.jobPrefix}-${j}`, hosts, new Random(o.seed).fork(j + 1)));
    }
    // Stable sort keeps each job's own order at equal times.
    return all.sort((a, b) => a.ts - b.ts);
  }

  private jobEvents(job: string, hosts: string[], rng: Random): RankwatchEvent[] {
    const o = this.opts;
    const gpus = hosts.length * o.gpusPerNode;
    const end = o.startTs + o.days * 86_400_000;
    const rateMs = (o.ratePerNodeDay * hosts.length) / 86_400_000;
    const totalW = o.causes.reduce((s, c) => s + c.weight, 0);
    const pickCause = () => {
      let x = rng.next() * totalW;
      for (const c of o.causes) {
        x -= c.weight;
        if (x < 0) return c.cause;
      }
      return o.causes[o.causes.length - 1].cause;
    };
    const exp = () => (rateMs > 0 ? -Math.log(1 - rng.next()) / rateMs : Number.POSITIVE_INFINITY);
    const out: RankwatchEvent[] = [];
    let t = o.startTs;
    out.push({
      v: 1,
      kind: 'job',
      ts: t,
      job,
      world_size: gpus,
      gpu_model: o.gpuModel,
      dtype: 'bf16',
      parallel: { tp: o.gpusPerNode, pp: 1, dp: hosts.length },
      flops_per_step: 1e18,
      hosts,
    });
    out.push({ v: 1, kind: 'job_event', ts: t, job, event: 'start' });
    let step = 0;
    let savedStep = 0;
    const cycleMs = (o.intervalS + o.saveS) * 1000;
    while (t < end) {
      const fail = t + exp();
      // Segments of compute then a blocking save, until the next failure or the end.
      let segStart = t;
      while (segStart + cycleMs <= Math.min(fail, end)) {
        segStart += cycleMs;
        step += Math.max(1, Math.round(o.intervalS));
        savedStep = step;
        out.push({
          v: 1,
          kind: 'checkpoint',
          ts: Math.round(segStart),
          job,
          rank: 0,
          step,
          phase: 'save',
          dur_ms: o.saveS * 1000,
          ok: true,
        });
      }
      if (fail >= end) break;
      const ts = Math.round(fail);
      const cause = pickCause();
      const host = hosts[rng.int(hosts.length)];
      const f = faultFor(cause);
      out.push({
        v: 1,
        kind: 'fault',
        ts: Math.max(o.startTs, ts - 1000),
        host,
        gpu: rng.int(o.gpusPerNode),
        job,
        source: f.source,
        ...(f.code !== undefined ? { code: f.code } : {}),
        message: f.message,
      });
      out.push({
        v: 1,
        kind: 'job_event',
        ts,
        job,
        event: 'interrupted',
        ...(o.causeOnEvent ? { cause } : {}),
      });
      t = ts + o.restartS * 1000;
      if (t >= end) break;
      step = savedStep;
      out.push({ v: 1, kind: 'job_event', ts: t, job, event: 'restart' });
      out.push({
        v: 1,
        kind: 'checkpoint',
        ts: t,
        job,
        rank: 0,
        step,
        phase: 'load',
        dur_ms: Math.min(o.restartS, o.saveS) * 1000,
        ok: true,
      });
    }
    out.push({ v: 1, kind: 'job_event', ts: end, job, event: 'finished' });
    return out;
  }
}

export interface GoodputRun {
  intervalS: number;
  /** Useful compute kept over wall time. */
  goodput: number;
  failures: number;
}

/**
 * Goodput of one job over `horizonS` of wall time for each interval, all against the same failure
 * times (common random numbers, so the curve's shape is not drowned in noise). Failures strike at
 * any time, also during saves and restarts, as in Daly's model.
 */
export function simulateGoodput(o: {
  intervalsS: number[];
  saveS: number;
  restartS: number;
  mtbfS: number;
  horizonS: number;
  seed?: number;
}): GoodputRun[] {
  const rng = new Random(o.seed ?? 1);
  const failures: number[] = [];
  for (let t = 0; t < o.horizonS; ) {
    t += -Math.log(1 - rng.next()) * o.mtbfS;
    failures.push(t);
  }
  return o.intervalsS.map((tau) => {
    let t = 0;
    let i = 0;
    let work = 0;
    let n = 0;
    while (t < o.horizonS) {
      const next = failures[i] ?? Number.POSITIVE_INFINITY;
      if (t + tau + o.saveS <= next) {
        t += tau + o.saveS;
        if (t <= o.horizonS) work += tau;
        continue;
      }
      // A failure: the segment is lost; restart, which itself can be struck again.
      t = next;
      i++;
      n++;
      while ((failures[i] ?? Number.POSITIVE_INFINITY) < t + o.restartS) {
        t = failures[i];
        i++;
        n++;
      }
      t += o.restartS;
    }
    return { intervalS: tau, goodput: work / o.horizonS, failures: n };
  });
}
