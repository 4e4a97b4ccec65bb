/**
 * PyTorch Flight Recorder dumps (one pickle per rank, written on a watchdog timeout or on demand)
 * → the problems they show, as `fault` events (source `flight_recorder`).
 *
 * A dump is a dict: `version`, `pg_config` {group name → {name, desc, ranks: "[0, 1]"}},
 * `pg_status`, and `entries`, the rank's ring buffer of collectives, each with `record_id`,
 * `pg_id`, `process_group` (name, desc), `collective_seq_id` (numbered per process group, the same
 * on every rank for one collective), `p2p_seq_id`, `is_p2p`, `profiling_name` ("nccl:all_reduce"),
 * input/output sizes and dtypes, `state` and `time_created_ns` (torch/csrc/distributed/c10d/
 * FlightRecorderDetail.hpp). The rank is the number the file name ends with (TORCH_FR_DUMP_TEMP_FILE
 * + rank), as PyTorch's analyzer reads it.
 *
 * The analysis follows what PyTorch's analyzer (torch/distributed/flight_recorder) looks for, in our
 * own terms: per process group, collectives are matched by sequence id across the members' dumps;
 * the first collective some members entered and others never reached names those others
 * (`not_joined`); otherwise the first collective whose ranks disagree on the op, the sizes, the
 * dtypes or the state names the ranks that differ from the majority (`type_mismatch`,
 * `size_mismatch`, `dtype_mismatch`, `state_mismatch`). After a group's first problem its later
 * collectives are not judged: their pairing is no longer trustworthy. A sequence id older than some
 * member's oldest entry (the ring buffer wrapped) is not judged either.
 */
import type { FaultEvent as F } from '../../schema/events.js';
import { collectiveOp } from './collective_op.js';
import { PickleError, type PyValue, readPickle } from './pickle.js';
import { type Open, type ParseProblem, problem } from './problems.js';

type FaultEvent = Open<F>;

export interface FrEntry {
  recordId: number;
  pgId?: number;
  pgName: string;
  pgDesc: string;
  seq: number;
  isP2p: boolean;
  profilingName: string;
  inputSizes: number[][];
  outputSizes: number[][];
  inputDtypes: string[];
  outputDtypes: string[];
  state: string;
  createdMs?: number;
  /** "name at file:line" of the first frame outside torch, when stack traces were dumped. */
  callSite?: string;
}

export interface FrDump {
  rank: number;
  version: string;
  /** Group name → global ranks, from this rank's pg_config (empty names skipped). */
  groups: Map<string, number[]>;
  entries: FrEntry[];
}

export type FrKind = 'not_joined' | 'size_mismatch' | 'type_mismatch' | 'dtype_mismatch' | 'state_mismatch';

/** What a dump set (or the analyzer's report) says went wrong in one collective. */
export interface FrProblem {
  fr: FrKind | 'other';
  /** The analyzer's own error type (SIZE_OR_SYNTAX_MISMATCH …), when there is one. */
  errorType?: string;
  /** Global rank at fault, when known. */
  rank?: number;
  pg?: string;
  pgName?: string;
  pgDesc?: string;
  seq?: number;
  opRaw?: string;
  missingRanks?: number[];
  expectedRanks?: number[];
  /** When the peers entered the collective (earliest time_created among them), epoch ms. */
  enteredMs?: number;
  /** What differs, in words ("input sizes [[4, 5]] where the others have [[3, 4]]"). */
  detail?: string;
  callSite?: string;
  /** The group's members were not in the dumps' pg_config and were taken from the entries. */
  membershipInferred?: boolean;
}

const MAX_LIST = 4096;

const isDict = (v: PyValue | undefined): v is { [k: string]: PyValue } =>
  v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Uint8Array);
const num = (v: PyValue | undefined): number | undefined =>
  typeof v === 'number' ? v : typeof v === 'bigint' ? Number(v) : undefined;
const str = (v: PyValue | undefined): string | undefined => (typeof v === 'string' ? v : undefined);

/** A list of strings, or undefined when the value is not one (bounded). */
function strings(v: PyValue | undefined): string[] | undefined {
  if (!Array.isArray(v) || v.length > MAX_LIST) return undefined;
  return v.every((s) => typeof s === 'string') ? (v as string[]) : undefined;
}

/** [[3, 4], [5]]: a list of lists of ints, bounded; undefined when the value is anything else. */
function sizes(v: PyValue | undefined): number[][] | undefined {
  if (!Array.isArray(v) || v.length > MAX_LIST) return undefined;
  const out: number[][] = [];
  let n = 0;
  for (const dims of v) {
    if (!Array.isArray(dims)) return undefined;
    n += dims.length;
    if (n > MAX_LIST) return undefined;
    const d: number[] = [];
    for (const x of dims) {
      const k = num(x);
      if (k === undefined) return undefined;
      d.push(k);
    }
    out.push(d);
  }
  return out;
}

/** "[0, 1, 2]" (how pg_config stores ranks) or a list. */
function rankList(v: PyValue | undefined): number[] | undefined {
  if (typeof v === 'string') {
    const m = /^\s*\[([\d,\s]*)\]\s*$/.exec(v);
    if (!m || v.length > 1_000_000) return undefined;
    return m[1].trim() ? m[1].split(',').map((s) => Number(s.trim())) : [];
  }
  if (Array.isArray(v) && v.length <= 1_000_000 && v.every((x) => typeof x === 'number'))
    return v as number[];
  return undefined;
}

function callSite(frames: PyValue | undefined): string | undefined {
  if (!Array.isArray(frames)) return undefined;
  for (const f of frames.slice(0, 64)) {
    if (!isDict(f)) continue;
    const file = str(f.filename) ?? '';
    if (/\/torch\/|<string>|multiprocessing\//.test(file)) continue;
    return `${str(f.name) ?? '?'} at ${file}:${num(f.line) ?? '?'}`;
  }
  return undefined;
}

/** The rank a dump file is for: the number its name ends with (rank_3, nccl_trace_rank_12). */
export function rankFromFileName(name: string): number | undefined {
  const m = /(\d+)$/.exec(name.replace(/^.*[\\/]/, ''));
  return m ? Number(m[1]) : undefined;
}

/** One rank's dump → its entries and groups; problems for what cannot be used. */
export function readFrDump(buf: Uint8Array, fileName: string): { dump?: FrDump; problems: ParseProblem[] } {
  const problems: ParseProblem[] = [];
  const bad = (reason: string) => ({ problems: [problem(0, `${fileName}: ${reason}`, '')] });
  let root: PyValue;
  try {
    root = readPickle(buf);
  } catch (err) {
    if (err instanceof PickleError) return bad(`not a Flight Recorder dump we can read: ${err.message}`);
    throw err;
  }
  if (!isDict(root) || !Array.isArray(root.entries ?? []))
    return bad('a pickle, but not a Flight Recorder dump');
  const rank = num(root.rank) ?? rankFromFileName(fileName);
  if (rank === undefined) return bad('no rank: the file name does not end with one');
  const groups = new Map<string, number[]>();
  if (isDict(root.pg_config))
    for (const [name, cfg] of Object.entries(root.pg_config)) {
      const ranks = isDict(cfg) ? rankList(cfg.ranks) : undefined;
      // torch 2.15's gloo recorder registers every group under an empty name: useless for matching.
      if (name !== '' && ranks) groups.set(name, ranks);
    }
  const entries: FrEntry[] = [];
  const raw = (root.entries as PyValue[] | undefined) ?? [];
  raw.forEach((e, i) => {
    const pg = isDict(e) && Array.isArray(e.process_group) ? e.process_group : undefined;
    const fields = isDict(e)
      ? {
          recordId: num(e.record_id),
          seq: num(e.collective_seq_id),
          name: str(e.profiling_name),
          inputSizes: sizes(e.input_sizes),
          outputSizes: sizes(e.output_sizes),
        }
      : undefined;
    if (
      !isDict(e) ||
      !fields ||
      !pg ||
      typeof pg[0] !== 'string' ||
      fields.recordId === undefined ||
      fields.seq === undefined ||
      fields.name === undefined ||
      !fields.inputSizes ||
      !fields.outputSizes
    ) {
      problems.push(problem(0, `${fileName}: entry ${i} lacks the fields a collective record has`, ''));
      return;
    }
    const created = e.time_created_ns;
    entries.push({
      recordId: fields.recordId,
      pgId: num(e.pg_id),
      pgName: pg[0] as string,
      pgDesc: str(pg[1]) ?? '',
      seq: fields.seq,
      isP2p: e.is_p2p === true || /:(?:send|recv)\b/.test(fields.name),
      profilingName: fields.name,
      inputSizes: fields.inputSizes,
      outputSizes: fields.outputSizes,
      inputDtypes: strings(e.input_dtypes) ?? [],
      outputDtypes: strings(e.output_dtypes) ?? [],
      state: str(e.state) ?? 'unknown',
      createdMs:
        typeof created === 'bigint'
          ? Number(created / 1_000_000n)
          : typeof created === 'number'
            ? Math.floor(created / 1e6)
            : undefined,
      callSite: callSite(e.frames),
    });
  });
  return { dump: { rank, version: str(root.version) ?? '?', groups, entries }, problems };
}

/** The collective's name after the backend prefix: "all_reduce" of "nccl:all_reduce". */
const opType = (e: FrEntry) => {
  const name = e.profilingName.includes(':') ? e.profilingName.split(':')[1] : e.profilingName;
  return name.split(' ')[0];
};
const same = (a: unknown[], b: unknown[]) => JSON.stringify(a) === JSON.stringify(b);
const fmt = (s: number[][]) => JSON.stringify(s).replaceAll(',', ', ');
const setOf = (a: string[]) => [...new Set(a)].sort().join(',');

/** Why `e` differs from `ref` for one collective, most telling first; undefined when it does not. */
function difference(ref: FrEntry, e: FrEntry): { fr: FrKind; errorType: string; detail: string } | undefined {
  const t = opType(ref);
  if (opType(e) !== t)
    return {
      fr: 'type_mismatch',
      errorType: 'COLLECTIVE_TYPE_MISMATCH',
      detail: `calls ${opType(e)} where the others call ${t}`,
    };
  // Ops whose per-rank inputs or outputs legitimately differ in size.
  const ragged = /all_to_all|_v$|^scatter|^gather|coalesced/.test(t);
  if (!ragged && !same(ref.inputSizes, e.inputSizes))
    return {
      fr: 'size_mismatch',
      errorType: 'SIZE_OR_SYNTAX_MISMATCH',
      detail: `input sizes ${fmt(e.inputSizes)} where the others have ${fmt(ref.inputSizes)}`,
    };
  if (!ragged && !same(ref.outputSizes, e.outputSizes))
    return {
      fr: 'size_mismatch',
      errorType: 'SIZE_OR_SYNTAX_MISMATCH',
      detail: `output sizes ${fmt(e.outputSizes)} where the others have ${fmt(ref.outputSizes)}`,
    };
  if (
    (ref.inputDtypes.length && e.inputDtypes.length && setOf(ref.inputDtypes) !== setOf(e.inputDtypes)) ||
    (ref.outputDtypes.length && e.outputDtypes.length && setOf(ref.outputDtypes) !== setOf(e.outputDtypes))
  )
    return {
      fr: 'dtype_mismatch',
      errorType: 'COLLECTIVE_DTYPE_MISMATCH',
      detail: `dtypes ${setOf(e.inputDtypes)}/${setOf(e.outputDtypes)} where the others have ${setOf(ref.inputDtypes)}/${setOf(ref.outputDtypes)}`,
    };
  if (ref.state !== e.state)
    return {
      fr: 'state_mismatch',
      errorType: 'COLLECTIVE_STATE_MISMATCH',
      detail: `state ${e.state} where the others are ${ref.state}`,
    };
  return undefined;
}

interface Group {
  name: string;
  desc: string;
  pgId?: number;
  members: number[];
  inferred: boolean;
  /** Rank → its collectives of this group by sequence id (first entry of each id). */
  byRank: Map<number, Map<number, FrEntry>>;
}

/** Groups of the dump set, keyed by name and members (split groups can share a name). */
function groupsOf(dumps: FrDump[]): Group[] {
  const all = dumps.map((d) => d.rank);
  const groups = new Map<string, Group>();
  for (const d of dumps)
    for (const e of d.entries) {
      if (e.isP2p) continue;
      const listed = d.groups.get(e.pgName);
      const key = listed ? `${e.pgName}|${listed.join(',')}` : `${e.pgName}|${e.pgDesc}|?`;
      let g = groups.get(key);
      if (!g) {
        g = {
          name: e.pgName,
          desc: e.pgDesc,
          pgId: e.pgId,
          members: listed ?? [],
          inferred: !listed,
          byRank: new Map(),
        };
        groups.set(key, g);
      }
      const seqs = g.byRank.get(d.rank) ?? new Map<number, FrEntry>();
      g.byRank.set(d.rank, seqs);
      if (!seqs.has(e.seq)) seqs.set(e.seq, e);
    }
  for (const g of groups.values())
    if (g.inferred)
      // Without pg_config the default group has every dumped rank; another group, those seen in it.
      g.members =
        g.name === '0' || g.desc === 'default_pg' ? [...all] : [...g.byRank.keys()].sort((a, b) => a - b);
  return [...groups.values()];
}

/** The problems a set of dumps (one per rank, one job) shows: at most one per process group. */
export function analyzeFr(dumps: FrDump[]): FrProblem[] {
  const out: FrProblem[] = [];
  const dumped = new Set(dumps.map((d) => d.rank));
  for (const g of groupsOf(dumps)) {
    const members = g.members.filter((r) => dumped.has(r));
    if (members.length < 2) continue;
    const seqsOf = (r: number) => g.byRank.get(r) ?? new Map<number, FrEntry>();
    const lo = (r: number) => Math.min(...seqsOf(r).keys());
    const hi = (r: number) => Math.max(...seqsOf(r).keys(), Number.NEGATIVE_INFINITY);
    // A member with no entry of the group at all never reached its first collective (or its
    // buffer holds only newer groups' work): its window starts at the beginning.
    const from = Math.max(...members.map((r) => (seqsOf(r).size ? lo(r) : Number.NEGATIVE_INFINITY)));
    const ids = [...new Set(members.flatMap((r) => [...seqsOf(r).keys()]))].filter((s) => s >= from);
    ids.sort((a, b) => a - b);
    const base = {
      pg: g.pgId !== undefined ? String(g.pgId) : undefined,
      pgName: g.name,
      pgDesc: g.desc,
      expectedRanks: g.members,
      ...(g.inferred ? { membershipInferred: true } : {}),
    };
    for (const seq of ids) {
      const joined = members.filter((r) => seqsOf(r).has(seq));
      const missing = members.filter((r) => !seqsOf(r).has(seq) && hi(r) < seq);
      const entries = joined.map((r) => seqsOf(r).get(seq)!);
      const entered = Math.min(...entries.map((e) => e.createdMs ?? Number.POSITIVE_INFINITY));
      const common = {
        ...base,
        seq,
        opRaw: entries[0].profilingName,
        ...(Number.isFinite(entered) ? { enteredMs: entered } : {}),
        callSite: entries.find((e) => e.callSite)?.callSite,
      };
      if (missing.length) {
        for (const rank of missing) out.push({ fr: 'not_joined', rank, missingRanks: missing, ...common });
        break;
      }
      // The majority's entry is the reference; on a tie, the lowest rank's (as PyTorch's analyzer).
      const votes = new Map<string, number[]>();
      for (const r of joined) {
        const e = seqsOf(r).get(seq)!;
        const sig = JSON.stringify([opType(e), e.inputSizes, e.outputSizes, setOf(e.inputDtypes), e.state]);
        votes.set(sig, [...(votes.get(sig) ?? []), r]);
      }
      if (votes.size < 2) continue;
      const ranked = [...votes.values()].sort((a, b) => b.length - a.length || a[0] - b[0]);
      const ref = seqsOf(ranked[0][0]).get(seq)!;
      const found = ranked
        .slice(1)
        .flat()
        .sort((a, b) => a - b)
        .map((rank) => ({ rank, diff: difference(ref, seqsOf(rank).get(seq)!) }))
        .filter((x) => x.diff);
      for (const { rank, diff } of found)
        out.push({
          ...common,
          fr: diff!.fr,
          errorType: diff!.errorType,
          detail: diff!.detail,
          rank,
          opRaw: ref.profilingName,
        });
      if (found.length) break;
    }
  }
  return out;
}

export interface FrContext {
  /** The collector's host: dumps do not say which host wrote them. */
  host: string;
  job?: string;
}

const WHAT: Record<FrProblem['fr'], string> = {
  not_joined: 'never joined',
  size_mismatch: 'size mismatch in',
  type_mismatch: 'collective type mismatch in',
  dtype_mismatch: 'dtype mismatch in',
  state_mismatch: 'state mismatch in',
  other: 'problem in',
};

/** One fault event per problem. `from` says where it came from (dumps or a report file). */
export function frFaultEvent(p: FrProblem, ts: number, ctx: FrContext, from: string): FaultEvent {
  const op = p.opRaw ? collectiveOp(p.opRaw) : undefined;
  const group = `process group ${p.pgName ?? p.pg ?? '?'}${p.pgDesc ? ` (${p.pgDesc})` : ''}`;
  const who = p.rank !== undefined ? `rank ${p.rank}` : 'a rank';
  const message =
    p.fr === 'not_joined'
      ? `${who} never joined ${p.opRaw ?? 'collective'} #${p.seq} of ${group} that its peers entered` +
        (p.missingRanks && p.missingRanks.length > 1 ? ` (missing: ${p.missingRanks.join(', ')})` : '')
      : `${who}: ${WHAT[p.fr]} ${p.opRaw ?? 'collective'} #${p.seq ?? '?'} of ${group}` +
        (p.detail ? `: ${p.detail}` : '') +
        (p.errorType && p.fr === 'other' ? ` (${p.errorType})` : '');
  return {
    v: 1,
    kind: 'fault',
    ts,
    host: ctx.host,
    host_source: 'collector',
    ...(ctx.job ? { job: ctx.job } : {}),
    ...(p.rank !== undefined ? { rank: p.rank } : {}),
    source: 'flight_recorder',
    code: p.errorType ?? p.fr,
    message: `${message}; from ${from}${p.callSite ? `; called at ${p.callSite}` : ''}`,
    fr: p.fr,
    ...(p.errorType ? { error_type: p.errorType } : {}),
    ...(p.pg !== undefined ? { pg: p.pg } : {}),
    ...(p.pgName !== undefined ? { pg_name: p.pgName } : {}),
    ...(p.pgDesc ? { pg_desc: p.pgDesc } : {}),
    ...(p.seq !== undefined ? { seq: p.seq } : {}),
    ...(op ? { op } : {}),
    ...(p.opRaw ? { op_raw: p.opRaw } : {}),
    ...(p.missingRanks ? { missing_ranks: p.missingRanks } : {}),
    ...(p.expectedRanks ? { expected_ranks: p.expectedRanks } : {}),
    ...(p.enteredMs !== undefined ? { entered_ts: p.enteredMs } : {}),
    ...(p.membershipInferred ? { membership_inferred: true } : {}),
  };
}
