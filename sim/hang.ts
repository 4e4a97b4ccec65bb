/**
 * A rank that hangs, as a synchronous job lives it: the culprit stops (host-side: a deadlock, a
 * stuck data loader) and its GPU goes idle; every other rank runs on until its first collective
 * that needs the culprit, directly or through a rank already waiting, and waits there with its NCCL
 * kernels spinning (100% utilisation at a fraction of compute power). If the hang outlasts the
 * NCCL watchdog's timeout (600 s, PyTorch's default), every waiting rank's watchdog fires 600 s
 * after it began to wait, naming the collective it waited in (its process group, operation and
 * SeqNum, as the nccl_watchdog source writes them); the culprit, which never entered it, prints
 * nothing. Then the processes exit and the job is interrupted.
 *
 * `hang`: the culprit hangs at the top of step `at`, before any work of it: no rank completes the
 * step. `hang_allreduce`: it finishes its forward and backward work, then hangs right before its
 * data-parallel all-reduce: the other data-parallel groups complete the step and wait in the next
 * one, the culprit's group waits in the all-reduce it never enters.
 */
import { Random } from '../core/random.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { FaultSpec } from './faults.js';
import type { Layout, RankPlace } from './topology.js';

/** PyTorch ProcessGroupNCCL's default collective timeout. */
export const WATCHDOG_TIMEOUT_MS = 600_000;

export const isHang = (type: FaultSpec['type']) => type === 'hang' || type === 'hang_allreduce';

export interface HangJob {
  job: string;
  layout: Layout;
  places: RankPlace[];
  stepMs: number;
  maxClock: number;
  telemetry: boolean;
  telemetryEveryMs: number;
}

/** Where one rank waits: its communicator, operation and sequence number, and since when. */
interface Wait {
  comm: string;
  op: 'ALLREDUCE' | 'RECV';
  seq: number;
  groupRank: number;
  since: number;
}

export interface HangOutcome {
  /** When the culprit stopped. */
  stopTs: number;
  /** When the culprit resumed (a hang shorter than the watchdog's timeout); else the job was interrupted. */
  resumeTs?: number;
  /** Event time the phase ended (the last timeout, or the resume). */
  endTs: number;
}

/**
 * The events of the hang from `from` (the culprit's step start for `hang`, the step's end for
 * `hang_allreduce`) until the culprit resumes or the watchdogs fire: GPU samples, then timeouts.
 * `compute` is each rank's compute time in the hung step (for `hang_allreduce`).
 */
export function* hangPhase(
  j: HangJob,
  spec: FaultSpec,
  culprit: number,
  step: number,
  t0: number,
  t1: number,
  compute: Float64Array,
  rng: Random,
): Generator<RankwatchEvent, HangOutcome> {
  const top = spec.type === 'hang';
  const stopTs = hangStopTs(spec, culprit, t0, compute);
  const from = top ? t0 : t1;
  const waits = j.places.map((p) => waitOf(j, p, j.places[culprit], top, step, t0, t1, compute, rng));
  const lasts = Math.round((spec.for ?? 660) * 1000);
  const fires = lasts >= WATCHDOG_TIMEOUT_MS;
  const timeouts: { ts: number; rank: number }[] = [];
  if (fires) {
    for (let r = 0; r < waits.length; r++)
      if (r !== culprit)
        timeouts.push({ ts: Math.round(waits[r].since + WATCHDOG_TIMEOUT_MS + 300 * rng.next()), rank: r });
    timeouts.sort((a, b) => a.ts - b.ts || a.rank - b.rank);
  }
  const endTs = fires ? (timeouts.at(-1)?.ts ?? stopTs + lasts) : stopTs + lasts;
  const every = j.telemetryEveryMs;
  let next = 0;
  for (let sec = Math.ceil((from + 1) / every) * every; sec <= endTs; sec += every) {
    while (next < timeouts.length && timeouts[next].ts <= sec) yield timeout(j, timeouts[next++], waits);
    if (!j.telemetry) continue;
    for (const p of j.places) {
      // A rank whose watchdog fired has exited: no more samples from its GPU.
      if (fires && p.rank !== culprit && sec > waits[p.rank].since + WATCHDOG_TIMEOUT_MS) continue;
      const state =
        p.rank === culprit
          ? sec >= stopTs
            ? 'idle'
            : 'compute'
          : sec >= waits[p.rank].since
            ? 'spin'
            : 'compute';
      yield sample(j, p, sec, state, rng);
    }
  }
  while (next < timeouts.length) yield timeout(j, timeouts[next++], waits);
  return { stopTs, ...(fires ? {} : { resumeTs: endTs }), endTs };
}

/** When the culprit stops: at the step's start (`hang`), or when its own work of the step is done. */
export function hangStopTs(spec: FaultSpec, culprit: number, t0: number, compute: Float64Array): number {
  return spec.type === 'hang' ? t0 : Math.round(t0 + compute[culprit]);
}

/** The interruption after the watchdogs fired, and the restart from the last checkpoint; returns when steps resume. */
export function* restartAfterHang(
  job: string,
  endTs: number,
  step: number,
  rng: Random,
): Generator<RankwatchEvent, number> {
  let ts = endTs + 1_000;
  yield { v: 1, kind: 'job_event', ts, job, event: 'interrupted', cause: 'NCCL watchdog timeout' };
  ts += 60_000 + Math.round(30_000 * rng.next());
  yield { v: 1, kind: 'job_event', ts, job, event: 'restart', cause: 'NCCL watchdog timeout' };
  ts += 20_000;
  yield { v: 1, kind: 'checkpoint', ts, job, rank: 0, step, phase: 'load', dur_ms: 20_000, ok: true };
  return ts;
}

/**
 * The first collective each rank cannot complete, and when it began to wait there. Its tensor-
 * parallel peers wait in their next tensor-parallel all-reduce, its pipeline neighbours in their
 * next receive from it; every other rank, whose pipeline runs without it, in its next
 * data-parallel all-reduce (each group holds a rank that is stuck). With `hang_allreduce` the
 * culprit's data-parallel group waits in the hung step's all-reduce, everyone else one step on.
 */
function waitOf(
  j: HangJob,
  p: RankPlace,
  c: RankPlace,
  top: boolean,
  step: number,
  t0: number,
  t1: number,
  compute: Float64Array,
  rng: Random,
): Wait {
  const { tp, dp } = j.layout;
  const jitter = 1 + 0.02 * rng.normal();
  const inGroup = p.stage === c.stage && p.tp === c.tp;
  if (!top && inGroup) return { ...dpComm(p), seq: step + 1, since: t0 + compute[p.rank] };
  const seq = (top ? step : step + 1) + 1;
  const after = (share: number) => (top ? t0 : t1) + share * j.stepMs * jitter;
  if (tp > 1 && p.stage === c.stage && p.dp === c.dp) return { ...tpComm(p), seq, since: after(0.05) };
  if (p.tp === c.tp && p.dp === c.dp && Math.abs(p.stage - c.stage) === 1)
    return { comm: `pp.d${p.dp}.t${p.tp}`, op: 'RECV', groupRank: p.stage, seq, since: after(0.1) };
  return dp > 1 ? { ...dpComm(p), seq, since: after(0.93) } : { ...tpComm(p), seq, since: after(0.05) };
}

const dpComm = (p: RankPlace) => ({
  comm: `dp.s${p.stage}.t${p.tp}`,
  op: 'ALLREDUCE' as const,
  groupRank: p.dp,
});
const tpComm = (p: RankPlace) => ({
  comm: `tp.s${p.stage}.d${p.dp}`,
  op: 'ALLREDUCE' as const,
  groupRank: p.tp,
});

/** A stable process-group id per communicator, as PyTorch numbers its groups (0 is the default group). */
function pgId(j: HangJob, comm: string): number {
  const { tp, dp, pp } = j.layout;
  const [kind, a, b] = comm.split('.');
  const x = Number(a.slice(1));
  const y = Number(b.slice(1));
  if (kind === 'dp') return 1 + x * tp + y;
  if (kind === 'tp') return 1 + pp * tp + x * dp + y;
  return 1 + pp * tp + pp * dp + x * tp + y;
}

function timeout(j: HangJob, t: { ts: number; rank: number }, waits: Wait[]): RankwatchEvent {
  const w = waits[t.rank];
  const p = j.places[t.rank];
  const pg = String(pgId(j, w.comm));
  const ran = t.ts - Math.round(w.since);
  return {
    v: 1,
    kind: 'fault',
    ts: t.ts,
    host: p.host,
    job: j.job,
    rank: t.rank,
    source: 'nccl_timeout',
    code: w.op,
    message: `NCCL ${w.op} SeqNum ${w.seq} ran ${ran} ms before timing out (process group ${pg} (${w.comm}), rank ${w.groupRank} in the group)`,
    seq: w.seq,
    op: w.op,
    group_rank: w.groupRank,
    ran_ms: ran,
    pg,
    pg_name: w.comm,
    timeout_ms: WATCHDOG_TIMEOUT_MS,
    last_completed: w.seq - 1,
  } as RankwatchEvent;
}

/**
 * One GPU sample: computing (busy, full power), spinning in an NCCL kernel while it waits (100%
 * utilisation, a fraction of the power) or idle (the hung rank: nothing runs, NVML's idle reason).
 */
function sample(
  j: HangJob,
  p: RankPlace,
  ts: number,
  state: 'compute' | 'spin' | 'idle',
  rng: Random,
): RankwatchEvent {
  const idle = state === 'idle';
  const spin = state === 'spin';
  return {
    v: 1,
    kind: 'gpu',
    ts,
    host: p.host,
    gpu: p.gpu,
    job: j.job,
    rank: p.rank,
    sm_clock_mhz: idle ? 345 + Math.round(30 * rng.next()) : j.maxClock,
    max_sm_clock_mhz: j.maxClock,
    power_w: Math.round(idle ? 68 + 10 * rng.next() : spin ? 150 + 50 * rng.next() : 640 + 40 * rng.next()),
    temp_c: Math.round(idle ? 38 + 4 * rng.next() : spin ? 48 + 4 * rng.next() : 62 + 6 * rng.next()),
    util_pct: idle ? 0 : spin ? 100 : Math.round(96 + 4 * rng.next()),
    throttle_reasons: idle ? 0x1 : 0,
  };
}

/** The hang's own random stream, so the job's other noise is the same with or without it. */
export function hangRandom(seed: number): Random {
  return new Random(seed ^ 0x2545f491);
}
