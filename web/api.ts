/** Calls the /v1 API with the read token kept in sessionStorage (gone when the browser closes). */
const KEY = 'rankwatch.token';

export const token = {
  get: () => sessionStorage.getItem(KEY) ?? '',
  set: (t: string) => sessionStorage.setItem(KEY, t),
  clear: () => sessionStorage.removeItem(KEY),
};

/** Why a call gave no data, in words a person can act on. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
  /** 401/403: the token is missing, unknown or lacks the read scope. */
  get auth(): boolean {
    return this.status === 401 || this.status === 403;
  }
}

export async function api<T>(
  path: string,
  query: Record<string, string | number | undefined> = {},
): Promise<T> {
  const qs = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined) qs.set(k, String(v));
  const url = qs.size ? `${path}?${qs}` : path;
  const t = token.get();
  let res: Response;
  try {
    res = await fetch(url, { headers: t ? { authorization: `Bearer ${t}` } : {} });
  } catch {
    throw new ApiError(
      0,
      'The rankwatch server does not answer: is `rankwatch up` (or `serve`) still running?',
    );
  }
  if (res.ok) return (await res.json()) as T;
  const body = (await res.json().catch(() => ({}))) as { message?: string };
  const why = body.message ?? res.statusText;
  if (res.status === 503)
    throw new ApiError(503, `The store is down (${why}). This page tries again every few seconds.`);
  throw new ApiError(res.status, why);
}

export interface Finding {
  id: string;
  ts: number;
  type: string;
  state: 'open' | 'update' | 'resolved';
  job?: string;
  host: string;
  gpu?: number;
  rank?: number;
  peer_host?: string;
  severity: 'info' | 'warning' | 'critical';
  onset_ts?: number;
  evidence: Record<string, unknown>;
  est_cost_pct?: number;
  action: string;
  summary: string;
  /** Resolved: why it ended (the summary stays what it was while open). */
  resolution?: string;
  acked_by?: string;
  acked_at?: number;
  silenced_until?: number;
  silenced_by?: string;
}

export interface JobRow {
  job: string;
  status: 'running' | 'finished' | 'interrupted' | 'stale';
  first_ts: number;
  last_ts: number;
  ranks: number;
  world_size: number;
  gpu_model: string;
  last_step: number;
  mfu_now: number | null;
  mfu_avg: number | null;
  open_findings: number;
}

export interface JobSummary extends JobRow {
  step_ms: number | null;
  compute_ms: number | null;
  tokens_per_s: number | null;
  hosts: string[];
  findings: Finding[];
}

export interface MfuPoint {
  ts: number;
  mfu: number;
  tflops_per_gpu: number;
  step_ms: number;
  steps: number;
  tokens_per_s: number | null;
}

export interface StepPoint {
  ts: number;
  steps: number;
  step_ms: number;
  compute_p50_ms: number;
  compute_max_ms: number;
  comm_wait_p50_ms: number;
}

export interface Cell {
  minute: number;
  rank: number;
  host: string;
  gpu: number;
  stage: number;
  rel_compute: number;
}

export interface Fault {
  ts: number;
  host: string;
  gpu: number;
  job: string;
  rank: number;
  source: string;
  code: string;
  message: string;
}

export interface NodeRow {
  host: string;
  /** The node's state in the repair loop's durable state. */
  state: string;
  out_by_rankwatch: boolean;
  dry_run_out: boolean;
  needs_human: boolean;
  state_since: number | null;
  state_reason: string | null;
  faults: number;
  fault_sources: string[];
  throttled_gpu_minutes: number;
  ecc_dbe: number;
  active_findings: number;
  /** The strongest action an open finding asks for (a request, not a state). */
  worst_action: string;
}

export interface CheckpointStats {
  job: string;
  phase: string;
  count: number;
  failures: number;
  p50_ms: number;
  p95_ms: number;
  max_ms: number;
  mean_ok_ms: number | null;
  [k: string]: unknown;
}

/** A row of GET /v1/jobs/{job}/slow-gpus and GET /v1/slow-gpus (which adds `jobs`). */
export interface SlowGpu {
  job: string;
  ts: number;
  rank: number;
  host: string;
  gpu: number;
  stage: number;
  slowdown_pct: number;
  cost_pct: number;
  gpu_hours_per_day: number;
  steps: number;
  jobs?: number;
}

/** GET /v1/jobs/{job}/timeline: what the MFU chart marks. */
export interface Timeline {
  saves: { ts: number; step: number; dur_ms: number; ok: boolean }[];
  interruptions: { ts: number; restart_ts: number | null; cause: string; seen_from: string }[];
  notes: string[];
}
