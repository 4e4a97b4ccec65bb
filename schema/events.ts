/**
 * The v1 event contract of design.md as TypeBox schemas. Field names are the contract:
 * extend, never rename. Objects are open (unknown fields are kept, never rejected).
 */
import { type Static, type TSchema, Type } from '@sinclair/typebox';

const Str = (description: string) => Type.String({ minLength: 1, description });
// Upper bounds are what the store's columns hold (rank Int32, gpu and stage Int16, integers exact
// in a double): an event past them would be refused by the store or stored wrapped around.
const INT32_MAX = 2 ** 31 - 1;
const INT16_MAX = 2 ** 15 - 1;
const Int = (description: string, minimum = 0, maximum = Number.MAX_SAFE_INTEGER) =>
  Type.Integer({ minimum, maximum, description });
const Int32 = (description: string) => Int(description, 0, INT32_MAX);
const Int16 = (description: string) => Int(description, 0, INT16_MAX);
/**
 * Event times before 2100-01-01: the store's TTLs compute in DateTime, which ends in 2106, so a
 * later event would expire on insert (and past 2286 ClickHouse reads the 14-digit milliseconds
 * as YYYYMMDDhhmmss).
 */
const TS_LIMIT = Date.UTC(2100, 0, 1);
const Num = (description: string, minimum = 0) => Type.Number({ minimum, description });
const Opt = <T extends TSchema>(t: T) => Type.Optional(t);

function kind<K extends string, P extends Record<string, TSchema>>(k: K, description: string, props: P) {
  return Type.Object(
    {
      v: Type.Literal(1, { description: 'contract version' }),
      kind: Type.Literal(k),
      ts: Type.Number({
        minimum: 0,
        exclusiveMaximum: TS_LIMIT,
        description: 'event time, epoch milliseconds',
      }),
      ...props,
    },
    { description, additionalProperties: true },
  );
}

export const ParallelLayout = Type.Object(
  {
    tp: Int('tensor-parallel size', 1),
    pp: Int('pipeline-parallel size', 1),
    dp: Int('data-parallel size', 1),
    cp: Opt(Int('context-parallel size', 1)),
    ep: Opt(Int('expert-parallel size', 1)),
  },
  { additionalProperties: true },
);

export const ModelConfig = Type.Object(
  {
    params: Opt(Num('total parameters, every expert of an MoE model counted (MFU uses the activated ones)')),
    layers: Int('transformer layers', 1),
    hidden: Int('hidden size', 1),
    heads: Int('attention (query) heads', 1),
    kv_heads: Opt(Int('key/value heads (GQA); defaults to heads', 1)),
    head_dim: Opt(Int('per-head dimension; defaults to hidden/heads', 1)),
    ffn_hidden: Opt(
      Int('MLP inner size; defaults as Megatron-LM does: 4*hidden, or int(8*hidden/3/64)*64 with swiglu', 1),
    ),
    swiglu: Opt(Type.Boolean({ description: 'gated MLP (three matrices)' })),
    seq_len: Int('sequence length', 1),
    vocab: Int('vocabulary size', 1),
    experts: Opt(Int('MoE experts', 1)),
    top_k: Opt(Int('MoE experts each token is routed to', 1)),
    moe_ffn_hidden: Opt(Int('MoE expert MLP inner size; defaults to ffn_hidden', 1)),
    shared_expert_ffn_hidden: Opt(
      Int('MoE shared experts: their inner size, all of them together (0 when none)', 0),
    ),
    moe_layers: Opt(Int('layers whose MLP is MoE (the rest are dense); defaults to all', 0)),
  },
  { additionalProperties: true },
);

export const JobEvent = kind('job', 'a training job announces its shape, once at start', {
  job: Str('job id'),
  world_size: Int('number of ranks', 1, INT32_MAX),
  gpu_model: Str('GPU model, e.g. H100-SXM'),
  dtype: Str('training math precision, e.g. bf16'),
  parallel: ParallelLayout,
  model: Opt(ModelConfig),
  flops_per_step: Opt(Num('model FLOPs per optimizer step, when the model config is not given')),
  global_batch_tokens: Opt(
    Num('tokens per optimizer step, whole job (all data-parallel replicas); wins over step tokens'),
  ),
  hosts: Opt(Type.Array(Type.String(), { description: 'hosts the job runs on' })),
  host_groups: Opt(
    Int(
      'host groups its GPU samples and collectives are keyed by (`JOB/hostgroup-N`, the sharded layout); set by the collector that keys them',
      1,
      INT32_MAX,
    ),
  ),
  host_group_size: Opt(Int('hosts per host group (the sharded layout); set with host_groups', 1, INT32_MAX)),
});

export const StepEvent = kind('step', 'one rank finished one optimizer step', {
  job: Str('job id'),
  rank: Int32('global rank'),
  host: Str('host name'),
  gpu: Int16('GPU index on the host'),
  stage: Opt(Int16('pipeline stage')),
  step: Int('optimizer step number'),
  step_ms: Num('wall time of the step'),
  compute_ms: Num('busy time, excluding time blocked in collectives'),
  comm_wait_ms: Opt(Num('time blocked waiting in collectives')),
  tokens: Opt(
    Num(
      "tokens of the global batch this rank's data-parallel replica consumed in the step (micro batch x " +
        'micro batches x full sequence length); the same on every rank of the replica whatever its ' +
        'tp/pp/cp coordinate, so job tokens = sum over ranks / (tp*pp*cp)',
    ),
  ),
  pid: Opt(
    Int32(
      "the rank's process id, so a node collector can map NCCL Inspector, Flight Recorder and RAS " +
        'records (which speak of host and pid) to the job and global rank',
    ),
  ),
});

export const CollectiveOp = Type.Union(
  ['allreduce', 'allgather', 'reducescatter', 'alltoall', 'broadcast', 'send', 'recv'].map((op) =>
    Type.Literal(op),
  ),
);

export const CollectiveEvent = kind('collective', 'timing of one NCCL collective or p2p transfer', {
  job: Str('job id'),
  rank: Int32('global rank'),
  host: Str('host name'),
  gpu: Opt(Int16('GPU index on the host (the NIC rail in rail-optimised fabrics)')),
  step: Int('optimizer step number'),
  op: CollectiveOp,
  comm: Str('communicator id'),
  nranks: Opt(Int('ranks in the communicator', 1, INT32_MAX)),
  peer: Opt(Int32('peer rank (send/recv)')),
  peer_host: Opt(Str('peer host (send/recv)')),
  bytes: Num('payload bytes'),
  dur_ms: Num('duration'),
  count: Opt(
    Int('operations reduced into this event: bytes and dur_ms are their sums (1 when unreduced)', 1),
  ),
  max_ms: Opt(Num("the slowest single operation's execution time")),
  busbw_gbs: Opt(Num('bus bandwidth the source reported, GB/s (mean over the operations)')),
  seq: Opt(
    Int(
      "the communicator's sequence number of the last operation reduced (NCCL Inspector counts per " +
        'communicator and op), so progress is comparable across the ranks of one communicator',
    ),
  ),
  comm_name: Opt(Type.String({ description: 'communicator name the source printed (e.g. a process group)' })),
  peer_comm_rank: Opt(
    Int32("send/recv: the peer's rank in the communicator, when its global rank is unknown"),
  ),
  comm_rank: Opt(
    Int32(
      "send/recv with peer_comm_rank: this rank's own rank in the communicator, so the peer's events name it",
    ),
  ),
  window: Opt(
    Type.Union(
      ['step', 'open', 'interval'].map((w) => Type.Literal(w)),
      {
        description:
          "what the event covers: the rank's whole step (step, the default); the step still in progress " +
          '(open: a cumulative snapshot, a later event of the same step follows; the hang detector reads ' +
          'it, the slow-link detector does not); or, with no step boundaries known, a reporting interval ' +
          '(interval: step is floor(ts / interval_ms))',
      },
    ),
  ),
  interval_ms: Opt(Num('window interval: the reporting interval the step number counts')),
});

export const GpuEvent = kind('gpu', 'one GPU telemetry sample', {
  host: Str('host name'),
  gpu: Int16('GPU index on the host'),
  uuid: Opt(Type.String()),
  job: Opt(Type.String()),
  rank: Opt(Int32('global rank')),
  sm_clock_mhz: Num('SM clock'),
  max_sm_clock_mhz: Opt(Num('maximum SM clock')),
  power_w: Opt(Num('power draw')),
  temp_c: Opt(Type.Number()),
  util_pct: Opt(Num('GPU utilisation')),
  throttle_reasons: Int('NVML clock-event reasons bitmask'),
  ecc_sbe: Opt(Int('single-bit ECC errors')),
  ecc_dbe: Opt(Int('double-bit ECC errors')),
});

export const CheckpointEvent = kind('checkpoint', 'a checkpoint save or load', {
  job: Str('job id'),
  rank: Opt(Int32('global rank')),
  step: Int('optimizer step number'),
  phase: Type.Union([Type.Literal('save'), Type.Literal('load')]),
  dur_ms: Num('duration'),
  bytes: Opt(Num('bytes written or read')),
  ok: Type.Boolean(),
});

export const FaultEvent = kind('fault', 'a hardware or runtime fault', {
  host: Str('host name'),
  gpu: Opt(Int16('GPU index on the host')),
  job: Opt(Type.String()),
  rank: Opt(Int32('global rank')),
  source: Str('xid, ecc, nccl_timeout, exit, link…'),
  code: Opt(Type.Union([Type.Integer(), Type.String()])),
  message: Type.String(),
  pid: Opt(
    Type.Union([Int('process id'), Type.String()], {
      description:
        'the process the fault names: a number (NCCL RAS), or as the kernel log printed it (Xid lines)',
    }),
  ),
  fr: Opt(
    Str(
      'Flight Recorder problem (source flight_recorder): not_joined, size_mismatch, type_mismatch, dtype_mismatch, state_mismatch, other',
    ),
  ),
  error_type: Opt(Str("the Flight Recorder analyzer's own error type, e.g. SIZE_OR_SYNTAX_MISMATCH")),
  pg: Opt(Str('process group id')),
  pg_name: Opt(Type.String({ description: 'process group name (Flight Recorder: its GUID, e.g. "0")' })),
  pg_desc: Opt(Type.String({ description: 'process group description, e.g. default_pg' })),
  seq: Opt(Int('collective sequence number within the process group or communicator')),
  op: Opt(Str('the collective, named like the collective ops (allreduce …) where it has such a name')),
  op_raw: Opt(Str('the collective as the source names it, e.g. nccl:all_reduce, AllReduce')),
  missing_ranks: Opt(Type.Array(Int32('global rank'), { description: 'global ranks that never joined' })),
  expected_ranks: Opt(Type.Array(Int32('global rank'), { description: "the process group's global ranks" })),
  ras: Opt(
    Str(
      'NCCL RAS state (source nccl_ras): missing, unresponsive, dead, behind, ahead (operation counts), comm_error',
    ),
  ),
  comm: Opt(Str('communicator hash, as the source prints it')),
  comm_rank: Opt(Int32('rank within the communicator')),
  nranks: Opt(Int('ranks in the communicator', 1, INT32_MAX)),
  ops: Opt(Int('operations of this kind the rank launched (NCCL RAS)')),
  peers_ops: Opt(Int('operations of this kind most of its communicator peers launched (NCCL RAS)')),
});

export const JobLifecycleEvent = kind('job_event', 'a job starts, restarts, is interrupted or finishes', {
  job: Str('job id'),
  event: Type.Union(['start', 'restart', 'interrupted', 'finished'].map((e) => Type.Literal(e))),
  cause: Opt(Type.String()),
});

export const CheckEvent = kind(
  'check',
  'a health check ran on a host (nccl-tests, dcgm-diag, burn-in…): evidence that a node is healthy or not',
  {
    host: Str('host name (the first host for a multi-host test; all of them in `hosts`)'),
    gpu: Opt(Int16('GPU index on the host, when the check is per GPU')),
    job: Opt(Type.String()),
    tool: Str('nccl-tests, dcgm-diag, burn-in…'),
    ok: Type.Boolean({ description: 'the check passed' }),
    hosts: Opt(Type.Array(Type.String(), { description: 'every host the check ran on' })),
    busbw_gbs: Opt(Num('best bus bandwidth measured, GB/s')),
    expected_gbs: Opt(Num('bus bandwidth the site expects, GB/s')),
  },
);

export const EVENT_SCHEMAS = {
  job: JobEvent,
  step: StepEvent,
  collective: CollectiveEvent,
  gpu: GpuEvent,
  checkpoint: CheckpointEvent,
  fault: FaultEvent,
  job_event: JobLifecycleEvent,
  check: CheckEvent,
} as const;

export type EventKind = keyof typeof EVENT_SCHEMAS;
export type JobEvent = Static<typeof JobEvent>;
export type StepEvent = Static<typeof StepEvent>;
export type CollectiveEvent = Static<typeof CollectiveEvent>;
export type GpuEvent = Static<typeof GpuEvent>;
export type CheckpointEvent = Static<typeof CheckpointEvent>;
export type FaultEvent = Static<typeof FaultEvent>;
export type JobLifecycleEvent = Static<typeof JobLifecycleEvent>;
export type CheckEvent = Static<typeof CheckEvent>;
export type ModelConfig = Static<typeof ModelConfig>;
export type ParallelLayout = Static<typeof ParallelLayout>;
export type RankwatchEvent =
  | JobEvent
  | StepEvent
  | CollectiveEvent
  | GpuEvent
  | CheckpointEvent
  | FaultEvent
  | JobLifecycleEvent
  | CheckEvent;
