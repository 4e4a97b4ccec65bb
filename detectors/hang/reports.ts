/**
 * What NCCL RAS and PyTorch's Flight Recorder say about a hang, as the nccl_ras and
 * flight_recorder sources write it (`fault` events; docs/collectors/ and the shapes agreed in
 * schema/events.ts): normalised to one report the hang detector weighs.
 *
 * RAS (`ras`): `missing`, `unresponsive`, `dead` (a rank RAS cannot reach: culprit), `behind` (it
 * launched fewer operations than its communicator peers: culprit once that does not move),
 * `ahead` (it launched more: evidence only), `comm_error` (a communicator error on that rank).
 * RAS "OK" is not a fault and not proof of health (NVIDIA/nccl#1730).
 * Flight Recorder (`fr`): `not_joined` (ranks that never joined a collective their peers entered:
 * culprits), size / type / dtype mismatches (a code bug, never hardware), `state_mismatch`, `other`.
 */
import type { FaultEvent } from '../../schema/events.js';

export const RAS_CULPRIT = new Set(['missing', 'unresponsive', 'dead', 'comm_error']);
/** Flight Recorder mismatches that are bugs in the job's code: the ranks called different collectives. */
export const CODE_BUG = new Set(['size_mismatch', 'type_mismatch', 'dtype_mismatch']);

export interface Report {
  source: 'nccl_ras' | 'flight_recorder';
  /** The `ras` or `fr` value. */
  kind: string;
  ts: number;
  host: string;
  /** The host is only the collector's (`host_source: "collector"`): the source could not place it. */
  hostUnknown?: boolean;
  gpu?: number;
  rank?: number;
  job?: string;
  comm?: string;
  pg?: string;
  pgName?: string;
  seq?: number;
  op?: string;
  ops?: number;
  peersOps?: number;
  /** Global ranks that never joined (Flight Recorder). */
  missing?: number[];
  /** The process group's members (Flight Recorder; absent where the analyzer printed a count). */
  expected?: number[];
  errorType?: string;
  message: string;
}

export function toReport(e: FaultEvent): Report | undefined {
  if (e.source !== 'nccl_ras' && e.source !== 'flight_recorder') return undefined;
  const x = e as FaultEvent & Record<string, unknown>;
  const kind = e.source === 'nccl_ras' ? x.ras : x.fr;
  if (typeof kind !== 'string') return undefined;
  const int = (v: unknown) => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : undefined);
  const str = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  const opt = <K extends string, V>(k: K, v: V | undefined) => (v === undefined ? {} : { [k]: v });
  const ranks = (v: unknown) =>
    Array.isArray(v) ? v.filter((r): r is number => int(r) !== undefined).slice(0, 1024) : undefined;
  const missing = ranks(x.missing_ranks);
  const expected = ranks(x.expected_ranks);
  const pg = typeof x.pg === 'number' ? String(x.pg) : str(x.pg);
  return {
    source: e.source,
    kind,
    ts: e.ts,
    host: e.host,
    ...opt('hostUnknown', x.host_source === 'collector' ? true : undefined),
    message: e.message.slice(0, 500),
    ...opt('gpu', e.gpu),
    ...opt('rank', e.rank),
    ...opt('job', e.job),
    ...opt('comm', str(x.comm)),
    ...opt('pg', pg),
    ...opt('pgName', str(x.pg_name) ?? str(x.pg_desc)),
    ...opt('seq', int(x.seq)),
    ...opt('op', str(x.op)),
    ...opt('ops', int(x.ops)),
    ...opt('peersOps', int(x.peers_ops)),
    ...opt('missing', missing?.length ? missing : undefined),
    ...opt('expected', expected?.length ? expected : undefined),
    ...opt('errorType', str(x.error_type)),
  };
}

/** A report in a finding's evidence. */
export function reportBrief(r: Report): Record<string, unknown> {
  const { source, kind, ts, host, gpu, rank, comm, pg, pgName, seq, op, ops, peersOps, missing, errorType } =
    r;
  return Object.fromEntries(
    Object.entries({
      source,
      kind,
      ts,
      host,
      gpu,
      rank,
      comm,
      pg,
      pg_name: pgName,
      seq,
      op,
      ops,
      peers_ops: peersOps,
      missing_ranks: missing?.slice(0, 16),
      error_type: errorType,
    }).filter(([, v]) => v !== undefined),
  );
}

/**
 * The ranks a Flight Recorder report blames, from its "not all ranks joining" blocks: the members
 * missing from a collective their peers entered, less those that entered another collective of
 * the report (they wait behind someone else: the analyzer names them missing from their own other
 * groups too), the ones missing from the most collectives first (a hung rank is missing from every
 * group of it that waits; a rank stuck elsewhere from its own group only). Where that leaves no
 * one, every missing rank counts.
 */
export function notJoinedCulprits(blocks: Iterable<Pick<Report, 'missing' | 'expected'>>): number[] {
  const times = new Map<number, number>();
  const joined = new Set<number>();
  for (const b of blocks) {
    const missing = new Set(b.missing ?? []);
    for (const r of missing) times.set(r, (times.get(r) ?? 0) + 1);
    for (const r of b.expected ?? []) if (!missing.has(r)) joined.add(r);
  }
  const alone = [...times.keys()].filter((r) => !joined.has(r));
  const pool = alone.length ? alone : [...times.keys()];
  const most = Math.max(0, ...pool.map((r) => times.get(r)!));
  return pool.filter((r) => times.get(r) === most).sort((a, b) => a - b);
}
