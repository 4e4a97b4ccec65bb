/** The finding contract of design.md, plus `state` for the open/update/resolved lifecycle. */
import { type Static, Type } from '@sinclair/typebox';

export const FINDING_TYPES = [
  'straggler',
  'throttle',
  'slow_link',
  'xid',
  'ecc',
  'checkpoint_slow',
  'checkpoint_interval',
  'mfu_drop',
  'nccl_busbw_low',
  'nccl_busbw_collapse',
  'nccl_data_corruption',
  'nccl_slow_host',
  'nccl_hang',
  'nccl_desync',
  'nccl_rank_behind',
  'mfu_implausible',
  'mfu_unavailable',
  'cordon_breaker',
  'recurring_stall',
] as const;

export const Severity = Type.Union(['info', 'warning', 'critical'].map((s) => Type.Literal(s)));
export const Action = Type.Union(['none', 'watch', 'cordon', 'drain', 'rma'].map((s) => Type.Literal(s)));
export const FindingState = Type.Union(['open', 'update', 'resolved'].map((s) => Type.Literal(s)));

export const Finding = Type.Object(
  {
    id: Type.String({ description: 'stable id of the incident; open, update and resolved share it' }),
    ts: Type.Number({ description: 'event time when this finding event was emitted (epoch ms)' }),
    type: Type.String({ description: `one of ${FINDING_TYPES.join(', ')}` }),
    state: FindingState,
    job: Type.Optional(Type.String()),
    host: Type.String(),
    gpu: Type.Optional(Type.Integer()),
    rank: Type.Optional(Type.Integer()),
    peer_host: Type.Optional(Type.String()),
    severity: Severity,
    onset_ts: Type.Optional(Type.Number()),
    evidence: Type.Record(Type.String(), Type.Unknown()),
    est_cost_pct: Type.Optional(
      Type.Number({ description: "share of the job's throughput it costs, percent" }),
    ),
    action: Action,
    summary: Type.String({
      description: 'one sentence a person reads; a resolved finding keeps the one it had while open',
    }),
    resolution: Type.Optional(Type.String({ description: 'resolved findings: why it ended' })),
    related: Type.Optional(
      Type.Array(Type.String(), { description: 'ids of findings this one explains or is explained by' }),
    ),
  },
  { additionalProperties: true },
);

export type Finding = Static<typeof Finding>;
export type FindingType = (typeof FINDING_TYPES)[number];
export type Severity = Finding['severity'];
export type Action = Finding['action'];
