/**
 * Who a process is. NCCL Inspector, Flight Recorder and RAS speak of hosts, pids and GPUs; the
 * event contract speaks of jobs, global ranks and steps. The node collector learns the mapping
 * from the training hook's `step` events it relays (host, pid, gpu → job, rank, and the rank's
 * step boundaries), and where no hook runs, from the process environment of a pid on this node
 * (/proc/PID/environ: the variables torchrun, Slurm and Open MPI set, see ENV below). What it
 * cannot map it says why (`whyUnmapped`); it never guesses.
 *
 * Memory is bounded: at most `maxProcesses` (host, pid) entries and as many (host, GPU) owners
 * (oldest forgotten first), and `maxStepsPerRank` step boundaries per rank.
 */
import { readFileSync } from 'node:fs';

export interface RankIdentity {
  job: string;
  /** Global rank. */
  rank: number;
  /** The host name events carry (the hook's, or this collector's for an environment mapping). */
  host: string;
  gpu?: number;
  stage?: number;
  /** Where the mapping came from: the hook's step events, or the process environment. */
  via: 'hook' | 'environ';
}

/** One step of one rank, as the hook timed it: it ended at `endMs` after running `stepMs`. */
export interface StepBoundary {
  step: number;
  endMs: number;
  stepMs: number;
}

/** The environment variables read, in order of preference. */
export const ENV = {
  job: ['RANKWATCH_JOB', 'SLURM_JOB_ID', 'SLURM_JOBID', 'TORCHELASTIC_RUN_ID'],
  rank: ['RANK', 'SLURM_PROCID', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK'],
  gpu: ['LOCAL_RANK', 'SLURM_LOCALID', 'OMPI_COMM_WORLD_LOCAL_RANK'],
} as const;

export interface RankMapOptions {
  /** Names this node goes by (the collector's host first): only their pids' environments are read. */
  localHosts: readonly string[];
  /** Reads a process's environment (NUL-separated); the default reads /proc/PID/environ. */
  readEnviron?: (pid: number) => string;
  maxProcesses?: number;
  maxStepsPerRank?: number;
  /** A pid whose environment could not name it is asked again after this long (it may still be starting). */
  environRetryMs?: number;
}

type Listener = (id: RankIdentity, boundary: StepBoundary) => void;
type RemapListener = (was: RankIdentity, now: RankIdentity) => void;

const key = (host: string, n: number) => `${host}\u0000${n}`;
const rankKey = (job: string, rank: number) => `${job}\u0000${rank}`;

export class RankMap {
  private readonly byPid = new Map<string, RankIdentity>();
  private readonly byGpu = new Map<string, RankIdentity>();
  private readonly steps = new Map<string, StepBoundary[]>();
  /** Environment lookups that named nobody: why, and when to ask again. */
  private readonly misses = new Map<string, { why: string; retryAt: number }>();
  private readonly listeners = new Set<Listener>();
  private readonly remaps = new Set<RemapListener>();
  private readonly local: Set<string>;
  private readonly readEnviron: (pid: number) => string;
  private readonly maxProcesses: number;
  private readonly maxSteps: number;
  private readonly retryMs: number;

  constructor(o: RankMapOptions) {
    this.local = new Set(o.localHosts.filter(Boolean));
    this.readEnviron = o.readEnviron ?? ((pid) => readFileSync(`/proc/${pid}/environ`, 'latin1'));
    this.maxProcesses = o.maxProcesses ?? 65_536;
    this.maxSteps = o.maxStepsPerRank ?? 64;
    this.retryMs = o.environRetryMs ?? 5000;
  }

  /** Whether a host name is this node's. */
  isLocal(host: string): boolean {
    return this.local.has(host);
  }

  /** Learns from relayed events: `step` events (with `pid` where the hook sent it). Others are ignored. */
  learn(events: readonly unknown[]): void {
    for (const raw of events) {
      const e = raw as Record<string, unknown>;
      if (e?.kind !== 'step') continue;
      const { job, rank, host, gpu, pid, step, ts, step_ms: stepMs, stage } = e;
      if (typeof job !== 'string' || typeof host !== 'string' || !isCount(rank)) continue;
      const id: RankIdentity = {
        job,
        rank,
        host,
        ...(isCount(gpu) ? { gpu } : {}),
        ...(isCount(stage) ? { stage } : {}),
        via: 'hook',
      };
      if (isCount(pid) && pid > 0) {
        const k = key(host, pid);
        const was = this.byPid.get(k);
        if (!was || was.job !== job || was.rank !== rank || was.gpu !== id.gpu) {
          bounded(this.byPid, k, id, this.maxProcesses);
          // The environment named it first (its hook's first step had not ended yet): the hook wins.
          if (was && (was.job !== job || was.rank !== rank)) for (const l of this.remaps) l(was, id);
        }
        this.misses.delete(k);
      }
      if (id.gpu !== undefined) {
        const k = key(host, id.gpu);
        const was = this.byGpu.get(k);
        if (!was || was.job !== job || was.rank !== rank) bounded(this.byGpu, k, id, this.maxProcesses);
      }
      if (isCount(step) && typeof ts === 'number' && typeof stepMs === 'number' && stepMs >= 0) {
        const b = { step, endMs: ts, stepMs };
        if (this.addBoundary(rankKey(job, rank), b)) for (const l of this.listeners) l(id, b);
      }
    }
  }

  /**
   * The rank a process is: from the hook's steps, else (a pid on this node) from its environment.
   * Environment lookups are cached, and retried after `environRetryMs` when they named nobody.
   */
  lookup(host: string, pid: number, now = Date.now()): RankIdentity | undefined {
    const k = key(host, pid);
    const known = this.byPid.get(k);
    if (known) return known;
    if (!this.local.has(host)) return undefined;
    const miss = this.misses.get(k);
    if (miss && now < miss.retryAt) return undefined;
    const r = this.fromEnviron(pid);
    if (typeof r === 'string') {
      bounded(this.misses, k, { why: r, retryAt: now + this.retryMs }, this.maxProcesses);
      return undefined;
    }
    this.misses.delete(k);
    bounded(this.byPid, k, r, this.maxProcesses);
    return r;
  }

  /** Why a (host, pid) has no rank (after a lookup said so): one short phrase for logs and counters. */
  whyUnmapped(host: string, pid: number): string {
    if (!this.local.has(host))
      return `no step event with pid ${pid} from host ${host} (not this node: its environment cannot be read here)`;
    return this.misses.get(key(host, pid))?.why ?? `no step event with pid ${pid} yet`;
  }

  /** The rank last seen on a host's GPU (from the hook's steps), for records that name a GPU, not a pid. */
  ownerOfGpu(host: string, gpu: number): RankIdentity | undefined {
    return this.byGpu.get(key(host, gpu));
  }

  /** The rank's known step boundaries, oldest first (at most `maxStepsPerRank`). */
  boundaries(job: string, rank: number): readonly StepBoundary[] {
    return this.steps.get(rankKey(job, rank)) ?? [];
  }

  /** Called with each new step boundary; returns the unsubscribe. */
  onStep(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Called when a process's rank changes (the hook's step names a pid the environment had named otherwise). */
  onRemap(fn: RemapListener): () => void {
    this.remaps.add(fn);
    return () => this.remaps.delete(fn);
  }

  /** Adds a boundary in time order; false when it was known already (the same step twice). */
  private addBoundary(k: string, b: StepBoundary): boolean {
    let list = this.steps.get(k);
    if (!list) {
      list = [];
      bounded(this.steps, k, list, this.maxProcesses);
    }
    let i = list.length;
    while (i > 0 && list[i - 1].endMs > b.endMs) i--;
    if (list.some((x) => x.step === b.step && x.endMs === b.endMs)) return false;
    list.splice(i, 0, b);
    if (list.length > this.maxSteps) list.shift();
    return true;
  }

  private fromEnviron(pid: number): RankIdentity | string {
    let text: string;
    try {
      text = this.readEnviron(pid);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ESRCH') return `process ${pid} is gone and no step event named it`;
      return `cannot read /proc/${pid}/environ (${code ?? (err as Error).message}): run the collector as the training user or root, or use the hook`;
    }
    const env = new Map<string, string>();
    for (const kv of text.split('\0')) {
      const eq = kv.indexOf('=');
      if (eq > 0) env.set(kv.slice(0, eq), kv.slice(eq + 1));
    }
    const first = (names: readonly string[]) => {
      for (const n of names) {
        const v = env.get(n);
        if (v && v !== 'none') return v;
      }
      return undefined;
    };
    const rank = toCount(first(ENV.rank));
    if (rank === undefined) return `process ${pid} has no ${ENV.rank.join('/')} in its environment`;
    const job = first(ENV.job);
    if (job === undefined) return `process ${pid} has no job id (${ENV.job.join('/')}) in its environment`;
    const gpu = toCount(first(ENV.gpu));
    return { job, rank, host: [...this.local][0], ...(gpu !== undefined ? { gpu } : {}), via: 'environ' };
  }
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

function toCount(s: string | undefined): number | undefined {
  if (s === undefined || !/^\d{1,9}$/.test(s)) return undefined;
  return Number(s);
}

/** Sets `k` as the newest entry, forgetting the oldest past `max`. */
function bounded<V>(m: Map<string, V>, k: string, v: V, max: number): void {
  m.delete(k);
  m.set(k, v);
  if (m.size > max) m.delete(m.keys().next().value as string);
}
