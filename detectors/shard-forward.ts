/**
 * A job's events through its shards (docs/operations.md, "Capacity"). In the sharded layout every
 * event of a job is keyed by a host group (stream/host-groups.ts), so the job stage no longer
 * reads, validates and stores one bus event per rank and step (a 100k-GPU job's 30k step events
 * a second were most of its cost): the shard that owns the group stores them and passes on what
 * is not its own, in the order it read them, among its other records: steps in columns, the rest
 * (restarts, checkpoints, faults) as they came. One path keeps their order: had the job's own
 * events come on another topic, a restart or a watchdog's timeout could reach the job stage after
 * steps that followed it, or before steps that preceded it. The job stage turns the rows back
 * into the events they were and holds them with its others, so the step-stage detectors
 * (straggler, stall, MFU, hang, slow link, XID) see what replay sees.
 */
import type { RankwatchEvent, StepEvent } from '../schema/events.js';
import { hostIndex } from './record-hosts.js';
import { SHARD_FORMAT } from './slowlink/shard-reduce.js';

/**
 * Rows a record holds at most (a step about 120 bytes of JSON; other events are rare): a record
 * stays far under a message's size limit (stream/kafka.ts), so a busy delivery's go in several.
 */
export const STEPS_PER_RECORD = 2048;

/**
 * Event time of the job's `job` event the shard had read before (null: none): the job stage holds
 * what follows until it has read that event from the job's own key, as replay reads a job's events
 * after its job event (its GPU model, world size, host groups).
 */
type JobTs = number | null;

/** A host group's events other than steps, as they came. */
export interface ShardEvents {
  t: 'events';
  format: number;
  job: string;
  group: number;
  job_ts: JobTs;
  events: RankwatchEvent[];
}

/**
 * A host group's step events, in the order read, a column per field (null: the event had none);
 * hosts as indexes into `hosts`, each name once per record.
 */
export interface ShardSteps {
  t: 'steps';
  format: number;
  job: string;
  group: number;
  job_ts: JobTs;
  ts: number[];
  rank: number[];
  hosts: string[];
  host: number[];
  gpu: number[];
  stage: (number | null)[];
  step: number[];
  step_ms: number[];
  compute_ms: number[];
  comm_wait_ms: (number | null)[];
  tokens: (number | null)[];
  pid: (number | null)[];
  /** Fields beyond the contract's (a collector's own, e.g. Megatron's `timing`), null if none. */
  extra: (Record<string, unknown> | null)[];
}

/** The fields a steps record has a column for. */
const COLUMNS = new Set([
  'v',
  'kind',
  'ts',
  'job',
  'rank',
  'host',
  'gpu',
  'stage',
  'step',
  'step_ms',
  'compute_ms',
  'comm_wait_ms',
  'tokens',
  'pid',
]);

function extraOf(e: StepEvent): Record<string, unknown> | null {
  let extra: Record<string, unknown> | null = null;
  for (const k in e)
    if (!COLUMNS.has(k)) {
      extra ??= {};
      extra[k] = (e as Record<string, unknown>)[k];
    }
  return extra;
}

/**
 * Adds an event of `job` to the last record of `out` when it is the same job's and group's record
 * of its kind with room left, else to a new one: records keep their order among the shard's others.
 */
export function passOn(e: RankwatchEvent, job: string, group: number, jobTs: JobTs, out: unknown[]): void {
  if (e.kind === 'step') {
    addStep(e, group, jobTs, out);
    return;
  }
  const last = out[out.length - 1] as ShardEvents | undefined;
  if (
    last?.t === 'events' &&
    last.job === job &&
    last.group === group &&
    last.job_ts === jobTs &&
    last.events.length < STEPS_PER_RECORD
  )
    last.events.push(e);
  else out.push({ t: 'events', format: SHARD_FORMAT, job, group, job_ts: jobTs, events: [e] });
}

function addStep(e: StepEvent, group: number, jobTs: JobTs, out: unknown[]): void {
  const last = out[out.length - 1] as ShardSteps | undefined;
  const r =
    last?.t === 'steps' &&
    last.job === e.job &&
    last.group === group &&
    last.job_ts === jobTs &&
    last.ts.length < STEPS_PER_RECORD
      ? last
      : newRecord(e.job, group, jobTs, out);
  r.ts.push(e.ts);
  r.rank.push(e.rank);
  r.host.push(hostIndex(r, e.host));
  r.gpu.push(e.gpu);
  r.stage.push(e.stage ?? null);
  r.step.push(e.step);
  r.step_ms.push(e.step_ms);
  r.compute_ms.push(e.compute_ms);
  r.comm_wait_ms.push(e.comm_wait_ms ?? null);
  r.tokens.push(e.tokens ?? null);
  r.pid.push(e.pid ?? null);
  r.extra.push(extraOf(e));
}

function newRecord(job: string, group: number, jobTs: JobTs, out: unknown[]): ShardSteps {
  const r: ShardSteps = {
    t: 'steps',
    format: SHARD_FORMAT,
    job,
    group,
    job_ts: jobTs,
    ts: [],
    rank: [],
    hosts: [],
    host: [],
    gpu: [],
    stage: [],
    step: [],
    step_ms: [],
    compute_ms: [],
    comm_wait_ms: [],
    tokens: [],
    pid: [],
    extra: [],
  };
  out.push(r);
  return r;
}

/**
 * Whether row `i` of a steps record has the fields every step event has, each of its type. A
 * record of this format comes from a shard of this version, so a row without them is a bug or a
 * tampered topic, and such a row is dropped rather than judged.
 */
export function stepRowOk(r: ShardSteps, i: number): boolean {
  return (
    typeof r.ts?.[i] === 'number' &&
    typeof r.rank?.[i] === 'number' &&
    typeof r.hosts?.[r.host?.[i]] === 'string' &&
    typeof r.gpu?.[i] === 'number' &&
    typeof r.step?.[i] === 'number' &&
    typeof r.step_ms?.[i] === 'number' &&
    typeof r.compute_ms?.[i] === 'number'
  );
}

/** Rows of a steps record (its `ts` column's length). */
export function stepRows(r: ShardSteps): number {
  return Array.isArray(r.ts) ? r.ts.length : 0;
}

/**
 * Row `i` of a steps record (`stepRowOk`) as the step event it was: the fields the contract names;
 * a field the event did not have is absent, as in the event.
 */
export function stepAt(r: ShardSteps, i: number): StepEvent {
  const e: StepEvent = {
    v: 1,
    kind: 'step',
    ts: r.ts[i],
    job: r.job,
    rank: r.rank[i],
    host: r.hosts[r.host[i]],
    gpu: r.gpu[i],
    step: r.step[i],
    step_ms: r.step_ms[i],
    compute_ms: r.compute_ms[i],
  };
  const stage = r.stage?.[i];
  if (typeof stage === 'number') e.stage = stage;
  const wait = r.comm_wait_ms?.[i];
  if (typeof wait === 'number') e.comm_wait_ms = wait;
  const tokens = r.tokens?.[i];
  if (typeof tokens === 'number') e.tokens = tokens;
  const pid = r.pid?.[i];
  if (typeof pid === 'number') e.pid = pid;
  const extra = r.extra?.[i];
  if (extra && typeof extra === 'object')
    for (const k in extra) if (!COLUMNS.has(k)) (e as Record<string, unknown>)[k] = extra[k];
  return e;
}
