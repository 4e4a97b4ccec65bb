/**
 * Faults the simulator can inject, and how each one changes a rank's compute time, its GPU's
 * telemetry and its links. A fault is written `type:key=value,...`, e.g.
 * `throttle:rank=37,at=60,depth=0.2` or `nic:host=3,gpu=5,at=40,factor=3`.
 *
 * Field-like faults: `flap` (a NIC rail slow on one step in `every`, or in bursts of `burst`
 * steps), `drift` (a rank that slows gradually, reaching `slowdown` after `ramp` steps), `nvlink`
 * (a degraded NVLink on one GPU: its host's tensor-parallel all-reduce runs `factor` times slower),
 * `stall` (a rank held up `stall` seconds, a range `A-B`, every `every` steps give or take `jitter`:
 * a data loader or another process on its host; the time counts in its `compute_ms`).
 *
 * Hangs (sim/hang.ts): `hang` (a rank stops at the top of step `at`), `hang_allreduce` (it stops
 * right before its data-parallel all-reduce in step `at`), for `for` seconds: past the watchdog's
 * 600 s its peers time out and the job is interrupted and restarts.
 */
import { RankwatchError } from '../core/errors.js';
import type { Random } from '../core/random.js';

export const FAULT_TYPES = [
  'throttle',
  'slow_rank',
  'intermittent',
  'nic',
  'link',
  'power_brake',
  'xid',
  'flap',
  'drift',
  'nvlink',
  'hang',
  'hang_allreduce',
  'stall',
] as const;
export type FaultType = (typeof FAULT_TYPES)[number];

export interface FaultSpec {
  type: FaultType;
  /** Global rank hit (throttle, slow_rank, intermittent, xid; nic: the rank whose rail is degraded). */
  rank?: number;
  /** Host index hit (power_brake; nic with `gpu`). */
  host?: number;
  gpu?: number;
  /** First affected step. */
  at: number;
  /** Last affected step (inclusive); default: to the end. */
  until?: number;
  /** slow_rank / intermittent: extra compute time as a fraction (0.05 = 5% slower). */
  slowdown?: number;
  /** intermittent: slow on one step in `every`. */
  every?: number;
  /** throttle / power_brake: fraction the SM clock drops by. */
  depth?: number;
  /** link: the other end of a bad pair link (p2p between rank and peer only). */
  peer?: number;
  /** nic / link: bandwidth divisor on every transfer through the degraded NIC or link. */
  factor?: number;
  /** xid: the XID code; nvlink: the XID it also logs (74), if any. */
  code?: number;
  /** flap: slow steps come in runs of `burst` (1: one step in `every`, periodic). */
  burst?: number;
  /** drift: steps over which the slowdown grows linearly from 0 to `slowdown`. */
  ramp?: number;
  /** hang / hang_allreduce: seconds the rank stays hung (past 600 s the watchdog fires on its peers). */
  for?: number;
  /** stall: each gap between stalls is `every` plus a whole number of steps drawn from -jitter..jitter. */
  jitter?: number;
  /** stall: each stall's length in seconds, drawn uniformly from [min, max] (`stall=3-6`, or `stall=4`). */
  stall?: [number, number];
}

export const FAULT_DEFAULTS: Record<FaultType, Partial<FaultSpec>> = {
  throttle: { depth: 0.2 },
  slow_rank: { slowdown: 0.1 },
  intermittent: { slowdown: 0.3, every: 3 },
  nic: { factor: 3 },
  link: { factor: 3 },
  power_brake: { depth: 0.45 },
  xid: { code: 79 },
  flap: { factor: 3, every: 8, burst: 1 },
  drift: { slowdown: 0.1, ramp: 200 },
  nvlink: { factor: 3 },
  hang: { for: 660 },
  hang_allreduce: { for: 660 },
  stall: { every: 50, jitter: 5, stall: [3, 6] },
};

const NUMERIC_KEYS = [
  'rank',
  'host',
  'gpu',
  'peer',
  'at',
  'until',
  'slowdown',
  'every',
  'depth',
  'factor',
  'code',
  'burst',
  'ramp',
  'for',
  'jitter',
] as const;

/** Keys whose value is a range of seconds, `A-B` (or one number, `A`). */
const RANGE_KEYS = ['stall'] as const;

export function parseFault(text: string): FaultSpec {
  const [type, rest = ''] = text.split(':', 2);
  if (!(FAULT_TYPES as readonly string[]).includes(type)) {
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `unknown fault type "${type}" (expected ${FAULT_TYPES.join(', ')})`,
    );
  }
  const spec: Record<string, unknown> = { type, at: 0, ...FAULT_DEFAULTS[type as FaultType] };
  for (const pair of rest.split(',').filter(Boolean)) {
    const [key, value] = pair.split('=', 2);
    if ((RANGE_KEYS as readonly string[]).includes(key)) {
      spec[key] = parseRange(text, key, value);
      continue;
    }
    if (!(NUMERIC_KEYS as readonly string[]).includes(key)) {
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        `fault "${text}": unknown key "${key}" (expected ${[...NUMERIC_KEYS, ...RANGE_KEYS].join(', ')})`,
      );
    }
    const n = Number(value);
    if (value === undefined || !Number.isFinite(n)) {
      throw new RankwatchError('RANKWATCH_ERR_USAGE', `fault "${text}": ${key} needs a number`);
    }
    spec[key] = n;
  }
  return spec as unknown as FaultSpec;
}

/** `A-B` or `A` (seconds): both ends finite, 0 < A <= B. */
function parseRange(text: string, key: string, value: string | undefined): [number, number] {
  const m = /^([0-9.]+)(?:-([0-9.]+))?$/.exec(value ?? '');
  const lo = Number(m?.[1]);
  const hi = m?.[2] === undefined ? lo : Number(m[2]);
  if (!m || !Number.isFinite(lo) || !Number.isFinite(hi) || !(lo > 0) || hi < lo) {
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `fault "${text}": ${key} needs seconds as A-B with 0 < A <= B (e.g. ${key}=3-6), or one number`,
    );
  }
  return [lo, hi];
}

export function formatFault(f: FaultSpec): string {
  const keys = NUMERIC_KEYS.filter((k) => f[k] !== undefined && !(k === 'at' && f.at === 0));
  const parts = keys.map((k) => `${k}=${f[k]}`);
  if (f.stall) parts.push(`stall=${f.stall[0] === f.stall[1] ? f.stall[0] : f.stall.join('-')}`);
  return `${f.type}:${parts.join(',')}`;
}

/**
 * stall: the steps a rank stalls at, with each stall's length (ms): the first at `at`, each next
 * one `every` ± `jitter` steps after the one before, to `until` or the job's last step.
 */
export function stallPlan(f: FaultSpec, lastStep: number, rng: Random): Map<number, number> {
  const plan = new Map<number, number>();
  const [lo, hi] = f.stall ?? [3, 6];
  const every = f.every ?? 50;
  const jitter = f.jitter ?? 0;
  const end = Math.min(lastStep, f.until ?? lastStep);
  for (let step = f.at; step <= end; step += Math.max(1, every + rng.int(2 * jitter + 1) - jitter))
    plan.set(step, 1000 * (lo + (hi - lo) * rng.next()));
  return plan;
}

export function isActive(f: FaultSpec, step: number): boolean {
  return step >= f.at && (f.until === undefined || step <= f.until);
}

/** flap: whether the rail is slow at `step` (runs of `burst` slow steps starting every `every` steps). */
export function flapSlow(f: FaultSpec, step: number): boolean {
  return isActive(f, step) && (step - f.at) % (f.every ?? 8) < (f.burst ?? 1);
}

/** drift: the extra compute fraction at `step`, growing linearly to `slowdown` over `ramp` steps. */
export function driftSlowdown(f: FaultSpec, step: number): number {
  if (!isActive(f, step)) return 0;
  return (f.slowdown ?? 0.1) * Math.min(1, (step - f.at + 1) / Math.max(1, f.ramp ?? 200));
}

/** Share of compute that scales with the SM clock; the rest waits on memory and is unchanged. */
const CLOCK_BOUND_SHARE = 0.9;

/** Compute-time multiplier from an SM clock that dropped by `depth`. */
export function clockSlowdown(depth: number): number {
  return 1 + (1 / (1 - depth) - 1) * CLOCK_BOUND_SHARE;
}

/** The SM clock drop (fraction) that makes compute `multiplier` times as long: clockSlowdown's inverse. */
export function clockDropFor(multiplier: number): number {
  return 1 - 1 / (1 + (multiplier - 1) / CLOCK_BOUND_SHARE);
}

/** The job a fault is checked against. */
export interface FaultJob {
  ranks: number;
  steps: number;
  hosts: number;
  gpusPerHost: number;
}

/**
 * Refuses a fault that cannot happen in this job (a rank, host, GPU or peer outside it, an onset
 * past the last step, an end before the onset), with one line that names the fault and what to
 * change: injecting nothing and then reporting it "missed" would be worse.
 */
export function checkFault(f: FaultSpec, job: FaultJob): void {
  const problem = faultProblem(f, job);
  if (problem) throw new RankwatchError('RANKWATCH_ERR_USAGE', `--fault ${formatFault(f)}: ${problem}`);
}

function faultProblem(f: FaultSpec, job: FaultJob): string | undefined {
  const whole = ['rank', 'host', 'gpu', 'peer', 'at', 'until', 'every', 'code', 'jitter'] as const;
  for (const k of whole) {
    const v = f[k];
    if (v !== undefined && (!Number.isInteger(v) || v < 0))
      return `${k} must be a whole number of at least 0`;
  }
  const inJob = (what: string, v: number | undefined, n: number) =>
    v !== undefined && v >= n ? `${what} ${v} is not in the job (${what}s 0 to ${n - 1})` : undefined;
  const outside =
    inJob('rank', f.rank, job.ranks) ??
    inJob('host', f.host, job.hosts) ??
    inJob('gpu', f.gpu, job.gpusPerHost) ??
    inJob('rank', f.peer, job.ranks);
  if (outside) return outside;
  if (f.rank === undefined && f.host === undefined) return 'needs rank= or host=';
  if (f.type === 'link' && f.peer === undefined) return 'needs peer= (the rank at the other end)';
  if (f.at > job.steps - 1) return `at=${f.at} is past the last step (${job.steps - 1})`;
  if (f.until !== undefined && f.until < f.at) return `until=${f.until} is before at=${f.at}`;
  if (f.depth !== undefined && !(f.depth > 0 && f.depth < 1)) return 'depth is a fraction between 0 and 1';
  if (f.slowdown !== undefined && !(f.slowdown > 0)) return 'slowdown must be above 0';
  if (f.factor !== undefined && !(f.factor >= 1)) return 'factor must be at least 1';
  if (f.every !== undefined && f.every < 1) return 'every must be at least 1';
  if (f.for !== undefined && !(f.for > 0)) return 'for (seconds hung) must be above 0';
  if (f.jitter !== undefined && f.jitter >= (f.every ?? 1))
    return `jitter=${f.jitter} must be below every=${f.every} (stalls keep their order)`;
  return undefined;
}
