/**
 * The shard half of the slow-link detector (docs/operations.md, "Capacity"). A shard owns some
 * host groups of a job; per step it reduces their collective records to one record per
 * communicator: the shortest and longest duration its members reported, how many reports, the bus
 * bandwidth at the shortest, and the member ranks; the group's p2p edges of the step go in one
 * record, a row per edge and communicator (a record per edge, then per p2p communicator, were most
 * of the job stage's records and bytes: a pipeline's p2p communicators have one edge each). The
 * job stage merges the shards' records of a collective (minimum of minima, members joined:
 * `mergeReduced`) and hands them, and each group's edges as they came, to the judge
 * (`SlowLinkDetector.addReduced`), which builds what it would have built from the raw records.
 *
 * A group's step is sent once a record of a later step came from that group (records of a group
 * arrive in step order per rank), or at the end of input or when the bus is idle; each send is
 * followed by a mark, "group G of job J is complete through step S", which lets the job stage
 * release that step's events.
 *
 * An idle flush (or a group moving here mid-step) can send a step in parts; the rest comes as a
 * second record of the same communicator and step. That changes no finding, and is simpler than
 * holding a step until each of the group's ranks reported (the group's rank count, a timeout): the
 * job stage judges step S only once every group marked S+1, and a group's mark through S+1 comes
 * after the rest of its step S (the pipeline sends records in the order they are made), so the
 * parts are merged before S is judged (minimum of minima is order-free). The idle flush still
 * marks what it sends: a job whose steps stop (its end, a hang) then is not held for the job
 * stage's `holdMs`, which stays for a shard that is down.
 *
 * A communicator's members rarely change, so a group sends its member list of a communicator only
 * when it differs from the list the group last sent, and again every `MEMBERS_EVERY` steps; a
 * record without `members` means "the members this group last sent for this communicator". The
 * job stage keeps those lists (a job stage restarted since then learns them within
 * `MEMBERS_EVERY` steps; until it does, it does not judge that communicator: job-stage.ts).
 */
import type { CollectiveEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { hostIndex } from '../record-hosts.js';
import { busbwGBps } from './busbw.js';

/**
 * The format of the records shards send the job stage, on every record (`format`). A job stage
 * takes only its own and refuses the rest, so a change to any record's shape (a field renamed,
 * moved or meaning something else) comes with a new number: shards and job stage then run the same
 * version (docs/kafka.md, "Upgrading the sharded layout").
 */
export const SHARD_FORMAT = 5;

/** A member of a reduced collective: rank, host, GPU (-1: not given). */
export type Member = [number, string, number];

export interface ReducedCollective {
  t: 'reduced';
  format: number;
  job: string;
  group: number;
  step: number;
  /** The latest report's event time. */
  ts: number;
  op: string;
  comm: string;
  nranks?: number;
  bytes: number;
  min_ms: number;
  max_ms: number;
  count: number;
  /** Bus bandwidth at the shortest duration (nccl-tests' definition). */
  busbw_gbs: number;
  /** Each member once, in the order they first reported; absent: as the group last sent them. */
  members?: Member[];
}

/** The key a p2p record is filed under (no collective's `op|comm` is). */
const P2P = 'p2p';

/**
 * Edges a p2p record holds at most (about 80 bytes of JSON each): a group's step has about one
 * per rank, and a record must stay under a message's size limit (stream/kafka.ts), so a larger
 * group's step goes in parts.
 */
export const EDGES_PER_RECORD = 4096;

/** Steps after which a group sends a communicator's unchanged member list again. */
export const MEMBERS_EVERY = 16;

/**
 * A p2p edge as its first report gave it (sender or receiver side; gpu -1 and peer_host null:
 * not given), then the shortest and longest duration, how many reports and the latest's time.
 * Hosts are indexes into the record's `hosts`: a name once per record, not twice per edge (most
 * of an edge's bytes and of the job stage's parsing, as names).
 */
export type Edge = [
  op: string,
  rank: number,
  host: number,
  gpu: number,
  peer: number,
  peer_host: number | null,
  bytes: number,
  nranks: number | null,
  min_ms: number,
  max_ms: number,
  count: number,
  ts: number,
];

/**
 * A group's p2p edges in a step, of every p2p communicator (an edge: sender>receiver, whichever
 * end reported it; a row per communicator it went over). The judge keys an edge by its ranks, not
 * its communicator, so the communicator is not sent.
 */
export interface ReducedEdges {
  t: 'edges';
  format: number;
  job: string;
  group: number;
  step: number;
  /** The hosts the edges name, each once. */
  hosts: string[];
  edges: Edge[];
}

export interface ShardMark {
  t: 'mark';
  format: number;
  job: string;
  group: number;
  /** Every record of the group's steps up to here has been sent. */
  through: number;
  ts: number;
}

/** A GPU finding a shard raised, for the job stage's links (throttle explains straggler). */
export interface ShardFinding {
  t: 'finding';
  format: number;
  job?: string;
  host: string;
  finding: Finding;
}

export type ShardReduced = ReducedCollective | ReducedEdges;
export type ShardRecord = ShardReduced | ShardMark;

/** One group's open steps: each step's records by `op|comm` (p2p: `p2p`, one record). */
interface GroupState {
  job: string;
  group: number;
  steps: Map<number, Map<string, ShardReduced>>;
  /** Sets per record of members already listed (by rank). */
  seen: Map<ReducedCollective, Set<number>>;
  /** Per step's first p2p record (the one under `P2P`), all the step's edges by `comm|from>to`. */
  edgesOf: Map<ReducedEdges, Map<string, Edge>>;
  /** Per communicator (`op|comm`), the member list last sent, by rank, and the step it went with. */
  sent: Map<string, { byRank: Map<number, Member>; step: number }>;
  maxStep: number;
  /** The latest step of the group's step events (passed on as read): a flush marks it complete too. */
  stepMax: number;
  through: number;
}

export class ShardReducer {
  private readonly groups = new Map<string, GroupState>();

  /** A collective record of `group` (the bus key's); sends (to `out`) what a later step completes. */
  add(e: CollectiveEvent, group: number, out: ShardRecord[]): void {
    // A snapshot of a step still running, or a reporting interval: not one step's links (slowlink.add).
    if (e.window !== undefined && e.window !== 'step') return;
    const g = this.group(e.job, group);
    if (e.step > g.maxStep) {
      const before = g.maxStep;
      g.maxStep = e.step;
      if (before > Number.NEGATIVE_INFINITY) this.sendThrough(g, e.step - 1, e.ts, out);
    }
    let byKey = g.steps.get(e.step);
    if (!byKey) {
      byKey = new Map();
      g.steps.set(e.step, byKey);
    }
    if (e.op === 'send' || e.op === 'recv') {
      if (e.peer !== undefined) this.addEdge(g, byKey, e, group);
      return;
    }
    const key = `${e.op}|${e.comm}`;
    let r = byKey.get(key) as ReducedCollective | undefined;
    if (!r) {
      r = {
        t: 'reduced',
        format: SHARD_FORMAT,
        job: e.job,
        group,
        step: e.step,
        ts: e.ts,
        op: e.op,
        comm: e.comm,
        ...(e.nranks === undefined ? {} : { nranks: e.nranks }),
        bytes: e.bytes,
        min_ms: e.dur_ms,
        max_ms: e.dur_ms,
        count: 0,
        busbw_gbs: 0,
        members: [],
      };
      byKey.set(key, r);
      g.seen.set(r, new Set());
    }
    r.count++;
    if (e.ts > r.ts) r.ts = e.ts;
    if (e.dur_ms < r.min_ms) r.min_ms = e.dur_ms;
    if (e.dur_ms > r.max_ms) r.max_ms = e.dur_ms;
    const seen = g.seen.get(r)!;
    if (!seen.has(e.rank)) {
      seen.add(e.rank);
      r.members!.push([e.rank, e.host, e.gpu ?? -1]);
    }
  }

  /**
   * A p2p report into the group's edges of the step: a new edge, or the edge's figures. The step's
   * first record (under `P2P`) holds the index of all its edges; past `EDGES_PER_RECORD`, new ones
   * go in further records, sent after it, so the edges keep the order they first came in.
   */
  private addEdge(g: GroupState, byKey: Map<string, ShardReduced>, e: CollectiveEvent, group: number): void {
    let first = byKey.get(P2P) as ReducedEdges | undefined;
    if (!first) {
      first = { t: 'edges', format: SHARD_FORMAT, job: e.job, group, step: e.step, hosts: [], edges: [] };
      byKey.set(P2P, first);
      g.edgesOf.set(first, new Map());
    }
    const peer = e.peer!;
    const edges = g.edgesOf.get(first)!;
    const ek = e.op === 'send' ? `${e.comm}|${e.rank}>${peer}` : `${e.comm}|${peer}>${e.rank}`;
    const have = edges.get(ek);
    if (have) {
      foldEdge(have, e.dur_ms, e.dur_ms, 1, e.ts);
      return;
    }
    const part = Math.floor(edges.size / EDGES_PER_RECORD);
    let r = part === 0 ? first : (byKey.get(`${P2P}#${part}`) as ReducedEdges | undefined);
    if (!r) {
      r = { t: 'edges', format: SHARD_FORMAT, job: e.job, group, step: e.step, hosts: [], edges: [] };
      byKey.set(`${P2P}#${part}`, r);
    }
    const edge: Edge = [
      e.op,
      e.rank,
      hostIndex(r, e.host),
      e.gpu ?? -1,
      peer,
      e.peer_host === undefined ? null : hostIndex(r, e.peer_host),
      e.bytes,
      e.nranks ?? null,
      e.dur_ms,
      e.dur_ms,
      1,
      e.ts,
    ];
    edges.set(ek, edge);
    r.edges.push(edge);
  }

  /**
   * A step event of `group` was passed on (detectors/shard-forward.ts): a flush marks its step
   * complete, so the job stage does not wait for collectives of it that never come (the job's
   * last step, or a step with none). A group that has sent no collective at all (a job whose
   * collectors send none) is marked complete through the step before, as a later step's
   * collective marks it: else its steps would wait at the job stage for an idle flush, which a
   * shard busy with other jobs never has, or for `--shard-hold-s`.
   */
  noteStep(job: string, group: number, step: number, ts: number, out: ShardRecord[]): void {
    const g = this.group(job, group);
    if (step <= g.stepMax) return;
    const before = g.stepMax;
    g.stepMax = step;
    if (g.maxStep === Number.NEGATIVE_INFINITY && before > Number.NEGATIVE_INFINITY)
      this.sendThrough(g, step - 1, ts, out);
  }

  /** Sends every open step (end of input, an idle bus). */
  flush(out: ShardRecord[], ts: number): void {
    for (const g of this.groups.values()) this.sendThrough(g, Math.max(g.maxStep, g.stepMax), ts, out);
  }

  /** Sends a job's open steps (a job heard from no more, before it is forgotten). */
  flushJob(job: string, out: ShardRecord[], ts: number): void {
    for (const g of this.groups.values())
      if (g.job === job) this.sendThrough(g, Math.max(g.maxStep, g.stepMax), ts, out);
  }

  /** Another process owns the job (or one host group of it) now: drop its open steps without sending them. */
  forget(job: string, group?: number): void {
    for (const [k, g] of this.groups)
      if (g.job === job && (group === undefined || g.group === group)) this.groups.delete(k);
  }

  private group(job: string, group: number): GroupState {
    const k = `${job}/${group}`;
    let g = this.groups.get(k);
    if (!g) {
      g = {
        job,
        group,
        steps: new Map(),
        seen: new Map(),
        edgesOf: new Map(),
        sent: new Map(),
        maxStep: Number.NEGATIVE_INFINITY,
        stepMax: Number.NEGATIVE_INFINITY,
        through: Number.NEGATIVE_INFINITY,
      };
      this.groups.set(k, g);
    }
    return g;
  }

  private sendThrough(g: GroupState, step: number, ts: number, out: ShardRecord[]): void {
    if (step === Number.NEGATIVE_INFINITY) return;
    const done = [...g.steps.keys()].filter((s) => s <= step).sort((a, b) => a - b);
    for (const s of done) {
      for (const r of g.steps.get(s)!.values()) {
        if (r.t === 'edges') g.edgesOf.delete(r);
        else {
          r.busbw_gbs = busbwGBps(r.op, r.nranks ?? 2, r.bytes, r.min_ms);
          g.seen.delete(r);
          if (sentBefore(g, r)) r.members = undefined;
        }
        out.push(r);
      }
      g.steps.delete(s);
      // Communicators gone (renamed by a restart) since long before: their lists are not kept.
      for (const [k, v] of g.sent) if (v.step < s - 2 * MEMBERS_EVERY) g.sent.delete(k);
    }
    if (step > g.through) {
      g.through = step;
      out.push({ t: 'mark', format: SHARD_FORMAT, job: g.job, group: g.group, through: step, ts });
    }
  }
}

/** A shard's finding as the job stage reads it, keyed by its job. */
export function findingRecord(f: Finding): ShardFinding {
  return { t: 'finding', format: SHARD_FORMAT, job: f.job, host: f.host, finding: f };
}

/**
 * Whether the group sent this communicator's members, the same ones, within `MEMBERS_EVERY`
 * steps; if not, the record's list is noted as the one sent.
 */
function sentBefore(g: GroupState, r: ReducedCollective): boolean {
  const key = `${r.op}|${r.comm}`;
  const members = r.members!;
  const last = g.sent.get(key);
  if (last && r.step - last.step < MEMBERS_EVERY && sameMembers(last.byRank, members)) return true;
  g.sent.set(key, { byRank: new Map(members.map((m) => [m[0], m])), step: r.step });
  return false;
}

function sameMembers(byRank: Map<number, Member>, members: Member[]): boolean {
  if (byRank.size !== members.length) return false;
  for (const m of members) {
    const had = byRank.get(m[0]);
    if (!had || had[1] !== m[1] || had[2] !== m[2]) return false;
  }
  return true;
}

/**
 * Joins another shard's (or a redelivered) record of the same communicator and step into `into`:
 * its figures; the job stage joins member lists itself (per group, kept across steps).
 */
export function mergeReduced(into: ReducedCollective, r: ReducedCollective): void {
  into.count += r.count;
  if (r.ts > into.ts) into.ts = r.ts;
  if (r.max_ms > into.max_ms) into.max_ms = r.max_ms;
  if (r.min_ms < into.min_ms) {
    into.min_ms = r.min_ms;
    into.busbw_gbs = r.busbw_gbs;
  }
}

/** The key a merged record is filed under at the job stage. */
export function reducedKey(r: ShardReduced): string {
  return r.t === 'edges' ? P2P : `${r.op}|${r.comm}`;
}

function foldEdge(e: Edge, min: number, max: number, count: number, ts: number): void {
  if (min < e[8]) e[8] = min;
  if (max > e[9]) e[9] = max;
  e[10] += count;
  if (ts > e[11]) e[11] = ts;
}
