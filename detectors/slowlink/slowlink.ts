/**
 * Slow-link detection from `collective` events, by group testing.
 *
 * Every member of a communicator sees about the same duration (the slowest link sets it), so a
 * single event blames nobody. Instead, per step: communicators of the same kind (op, size,
 * message-size band) are compared by bus bandwidth, and p2p edges with each other; each gets a
 * slowness score z (robust units below the kind's median). A NIC rail (host/gpu) is suspect when
 * EVERY communicator and edge through it is slow: its score is the minimum z over them, so healthy
 * members of a slow group are cleared by their other, fast links. That score feeds a bounded
 * CUSUM like the straggler detector's. An edge that is slow while neither end's rail is, is
 * pair-specific: reported with `peer_host`.
 *
 * A link's duration is the shortest its members report: in real traces each rank's time includes
 * waiting for the slowest member to arrive, so a late rank (a straggler) makes a healthy
 * communicator look slow to everyone but itself; the last to arrive measures the transfer alone.
 *
 * Flapping rails (slow on one step in eight, or in bursts) add too little to the CUSUM to fire:
 * a second, Bernoulli CUSUM counts "hits", steps where every link through the rail is far below
 * its kind (flapZ robust units). Two hits close together open the rail; a flagged rail or pair
 * resolves only after sustained health: the clear CUSUM, no hit for several times the longest gap
 * between hits, and never while hits go on. An edge whose rail has recent hits is never called
 * pair-specific: the rail explains it.
 *
 * Intra-host communicators (every member on one host: tensor-parallel all-reduces over NVLink)
 * carry no NIC traffic, so they never clear or blame a rail; they are compared with their kind
 * on other hosts and get a CUSUM of their own. A slow one is the host's NVLink, named with its
 * GPUs (the pair when the group has two; one GPU when an NVLink XID named it).
 */

import { costClause, costFigure } from '../../core/figures.js';
import { round } from '../../core/round.js';
import type { CollectiveEvent } from '../../schema/events.js';
import { grown } from '../arrays.js';
import { type CusumConfig, fall, rise, score, smoothSpread } from '../cusum.js';
import { type FindingLog, findingId, severityForCost } from '../findings.js';
import { madSigmaInPlace, medianInPlace } from '../robust.js';
import type { RankTable } from '../steps.js';
import { busbwFactor } from './busbw.js';
import { CommPeers } from './comm-peers.js';
import { type LinkKind, StepLinks } from './links.js';
import type { ReducedEdges, ShardReduced } from './shard-reduce.js';
import { CusumTable, pairDst, pairSrc, RailIds, railPair } from './state.js';

export interface SlowLinkConfig extends CusumConfig {
  /** Steps an edge waits for its rails to be judged before it is called pair-specific. */
  pairWaitSteps: number;
  /** Open steps kept while collectives arrive. */
  maxOpenSteps: number;
  /** A step where every link through a rail is at least this far below its kind (robust units) is a hit. */
  flapZ: number;
  /** Hit probability per step on a healthy rail (p0) and on a flapping one (p1): the Bernoulli CUSUM's design. */
  flapP0: number;
  flapP1: number;
  /** Decision threshold of the hit CUSUM (two hits within ~10 steps at the defaults). */
  flapH: number;
  /** Steps without a hit a flagged link needs before it may resolve, at least (and 3x its longest gap between hits). */
  flapQuietSteps: number;
}

export const SLOWLINK_DEFAULTS: SlowLinkConfig = {
  k: 1.5,
  h: 24,
  cap: 8,
  minSigma: 0.03,
  sigmaAlpha: 0.05,
  resolveH: 30,
  minPeers: 4,
  pairWaitSteps: 2,
  maxOpenSteps: 6,
  flapZ: 6,
  flapP0: 0.002,
  flapP1: 0.08,
  flapH: 6.5,
  flapQuietSteps: 50,
};

/** What a Cusum row's finding text reads (built only for rows with a finding). */
interface Cusum {
  onsetStep: number;
  onsetTs: number;
  n: number;
  sumMeasured: number;
  sumExpected: number;
  sumExcessMs: number;
  stepMsAtOnset: number;
  hits: number;
  hitMeasured: number;
  hitExpected: number;
  worst: { key: string; kind: string | undefined } | undefined;
}

/** A step's links until it is judged: collectives and p2p edges, by index into `links`. */
interface OpenStep {
  links: StepLinks;
  /** Each collective's link by its `op:comm` id (-1: none yet this step). */
  linkOfColl: Int32Array;
  /** p2p edges: the first of each sending rank (a link index, -1 for none), chained by `next`. */
  edgeHead: Int32Array;
  /** Edges of ranks too large to index (not valid input, but still counted). */
  oddEdges: Map<number, number>;
}

const RAIL = 0;
const EDGE = 1;
const INTRA = 2;
/** Ranks past this are looked up without the per-rank cache. */
const MAX_CACHED_RANK = 1 << 24;
/** Capacity of a per-rank index that holds `rank`: doubling, at least 64. */
const indexOf = (rank: number): number => Math.max(64, 2 ** Math.ceil(Math.log2(rank + 1)));

/** The link that set a step's pace (-1: none) and its lead over the slowest link sharing none of its rails, in ms. */
interface Pace {
  top: number;
  lead: number;
}

export class SlowLinkDetector {
  private readonly open = new Map<number, OpenStep>();
  private readonly railIds = new RailIds();
  /** Rail id of each rank, once its host and GPU are known (-1 before): no string per event. */
  private railOfRank = new Int32Array(64).fill(-1);
  private readonly sigma = new Map<string, number>();
  /** CUSUM rows: one per rail (by rail id), per p2p edge (by rail pair), per intra-host group. */
  private readonly rails = new CusumTable();
  private railRow = new Int32Array(64).fill(-1);
  private readonly edges = new CusumTable();
  /** First edge row of each sending rail (-1 for none), chained by the table's `next`: found without hashing. */
  private edgeHead = new Int32Array(64).fill(-1);
  /** During a judge pass: the link each edge row is judged by. */
  private rowLink = new Int32Array(64).fill(-1);
  private rowPass = new Int32Array(64);
  /** During a judge pass: edges without a row, by sending rail (`newPass` says which pass set `newFirst`). */
  private newPass = new Int32Array(64);
  private newFirst = new Int32Array(64).fill(-1);
  /**
   * Judged steps, emptied for reuse: a step's links live across many young-generation
   * collections, so fresh ones would be promoted and die in the old space every step.
   */
  private readonly stepPool: OpenStep[] = [];
  /** Edge rows waiting for their rails to be judged, in row order. */
  private pending: number[] = [];
  /** Intra-host communicators, keyed `nvlink:host/gpu+gpu+...`. */
  private readonly intra = new CusumTable();
  private readonly intraRow = new Map<string, number>();
  private readonly intraKeys: string[] = [];
  /** GPUs an NVLink XID named, by host, for naming a slow intra-host group's GPU. */
  private readonly nvlinkHints = new Map<string, number>();
  private readonly stepTimes = new Map<number, { stepMs: number; ts: number }>();
  private lastTimes: { stepMs: number; ts: number } | undefined;
  private cumStepMs = 0;
  private scratch = new Float64Array(256);
  private bw = new Float64Array(256);
  /** Per rail during a judge pass: links through it, lowest score and worst link; `touched` in first-touch order. */
  private accLinks = new Int32Array(64);
  private accScore = new Float64Array(64);
  private accWorst = new Int32Array(64).fill(-1);
  private touched: number[] = [];
  /** A judge pass's candidates for the link that set the pace (reused). */
  private readonly candidates: number[] = [];
  private pass = 0;
  private readonly kinds: LinkKind[] = [];
  /** Collectives' ids (by op, then communicator) and their `op:comm` names. */
  private readonly collIds = new Map<string, Map<string, number>>();
  private collNames: string[] = [];
  private maxLinks = 0;
  /**
   * By collective id, the intra-host key last built and the member rails it was built from (count
   * and two order-free hashes; -1: none): a tensor-parallel group's key is built once, not every step.
   */
  private intraCount: number[] = [];
  private intraSig: number[] = [];
  private intraMix: number[] = [];
  private intraKeyOf: (string | undefined)[] = [];
  /** p2p peers a node collector could name only by their communicator rank. */
  private readonly peers = new CommPeers();

  constructor(
    private readonly job: string,
    private readonly ranks: RankTable,
    private readonly log: FindingLog,
    private readonly cfg: SlowLinkConfig = SLOWLINK_DEFAULTS,
  ) {
    this.flapHit = Math.log(cfg.flapP1 / cfg.flapP0);
    this.flapMiss = Math.log((1 - cfg.flapP1) / (1 - cfg.flapP0));
  }

  /** The flapping statistic's log-likelihood steps for a hit and a miss, once (every row moves each step). */
  private readonly flapHit: number;
  private readonly flapMiss: number;

  add(e: CollectiveEvent): void {
    // A snapshot of a step still running, or a reporting interval of a rank with no step
    // boundaries: not one step's links (collectors/reduce.ts).
    if (e.window !== undefined && e.window !== 'step') return;
    const step = this.openStep(e.step);
    const L = step.links;
    const rail = this.rail(e.rank, e.host, e.gpu);
    if (e.op === 'send' || e.op === 'recv') {
      const peer = this.peers.peerOf(e);
      if (peer === undefined) return;
      this.addEdge(step, e.op, e.rank, rail, peer.rank, peer.host, e.bytes, e.nranks, e.dur_ms);
      return;
    }
    const link = this.collLink(step, e);
    if (e.dur_ms < L.durMin[link]) L.durMin[link] = e.dur_ms;
    L.addRail(link, rail);
  }

  /**
   * A p2p transfer into its step's edge (sender>receiver): made by the first report of either
   * end, then its shortest duration. Both ends report the same transfer.
   */
  private addEdge(
    step: OpenStep,
    op: string,
    rank: number,
    rail: number,
    peerRank: number,
    peerHost: string | undefined,
    bytes: number,
    nranks: number | undefined,
    durMs: number,
  ): void {
    const L = step.links;
    // Plain ternaries, not a destructured pair: no array per p2p record.
    const sends = op === 'send';
    const from = sends ? rank : peerRank;
    const to = sends ? peerRank : rank;
    const indexed = from >= 0 && from < MAX_CACHED_RANK && Number.isInteger(from);
    if (indexed && from >= step.edgeHead.length) step.edgeHead = grown(step.edgeHead, indexOf(from), -1);
    let link: number;
    if (indexed) {
      link = step.edgeHead[from];
      while (link >= 0 && L.to[link] !== to) link = L.next[link];
    } else link = step.oddEdges.get(from * 1_048_576 + to) ?? -1;
    if (link < 0) {
      const peerRail = this.rail(peerRank, peerHost, undefined);
      link = this.newLink(
        L,
        'p2p',
        op,
        bytes,
        nranks,
        false,
        sends ? rail : peerRail,
        sends ? peerRail : rail,
      );
      L.to[link] = to;
      if (indexed) {
        L.next[link] = step.edgeHead[from];
        step.edgeHead[from] = link;
      } else step.oddEdges.set(from * 1_048_576 + to, link);
    }
    if (durMs < L.durMin[link]) L.durMin[link] = durMs;
  }

  /**
   * A communicator's step as the shards reduced it (the sharded layout, shard-reduce.ts): what
   * `add` builds from each member's record, without a record per member. Rails are named in the
   * members' order, as `add` would name them.
   */
  addReduced(r: ShardReduced): void {
    if (r.t === 'edges') {
      this.addEdges(r);
      return;
    }
    if (!r.members?.length) return;
    const step = this.openStep(r.step);
    const L = step.links;
    const [rank, host, gpu] = r.members[0];
    const first = this.rail(rank, host, gpu >= 0 ? gpu : undefined);
    const link = this.collLink(step, r);
    if (r.min_ms < L.durMin[link]) L.durMin[link] = r.min_ms;
    L.addRail(link, first);
    for (let m = 1; m < r.members.length; m++) {
      const [k, h, g] = r.members[m];
      L.addRail(link, this.rail(k, h, g >= 0 ? g : undefined));
    }
  }

  /**
   * A group's edges of a p2p communicator's step, straight into the step's links: what `add` does
   * with each edge's report at its shortest duration, without a record object per edge (one per
   * p2p transfer and step was most of the job stage's allocation). Another group's record of the
   * same edges joins them here (the shortest of both), as the other end's report does in `add`.
   */
  private addEdges(r: ReducedEdges): void {
    const step = this.openStep(r.step);
    const hosts: unknown[] = Array.isArray(r.hosts) ? r.hosts : [];
    for (const x of r.edges) {
      const host = hosts[x[2]];
      // A host index the record does not name: a shard's bug or a tampered topic, not an edge.
      if (typeof host !== 'string') continue;
      const rail = this.rail(x[1], host, x[3] >= 0 ? x[3] : undefined);
      const peerHost = x[5] === null ? undefined : (hosts[x[5]] as string | undefined);
      this.addEdge(step, x[0], x[1], rail, x[4], peerHost, x[6], x[7] ?? undefined, x[8]);
    }
  }

  /** The open step's table, opened (from the pool) if it is not. */
  private openStep(n: number): OpenStep {
    let step = this.open.get(n);
    if (!step) {
      if (this.open.size >= this.cfg.maxOpenSteps) this.open.delete(Math.min(...this.open.keys()));
      step = this.stepPool.pop() ?? {
        links: new StepLinks(),
        linkOfColl: new Int32Array(Math.max(64, this.collNames.length)).fill(-1),
        edgeHead: new Int32Array(indexOf(this.railOfRank.length - 1)).fill(-1),
        oddEdges: new Map(),
      };
      this.open.set(n, step);
    }
    return step;
  }

  /** A collective's link in a step (op, comm, size and bytes from `e`), made on its first record. */
  private collLink(step: OpenStep, e: { op: string; comm: string; bytes: number; nranks?: number }): number {
    const id = this.collId(e.op, e.comm);
    if (id >= step.linkOfColl.length)
      step.linkOfColl = grown(step.linkOfColl, Math.max(id + 1, step.linkOfColl.length * 2), -1);
    let link = step.linkOfColl[id];
    if (link < 0) {
      link = this.newLink(step.links, e.op, e.op, e.bytes, e.nranks, true, -1, -1);
      step.links.key[link] = this.collNames[id];
      step.links.collId[link] = id;
      step.linkOfColl[id] = link;
    }
    return link;
  }

  /**
   * A collective's `op:comm` id, the same every step: a step's communicators are looked up and
   * named without a map or a string built per step. Communicators a restart renamed are dropped
   * with the ids (see forgetCollIds).
   */
  private collId(op: string, comm: string): number {
    let byComm = this.collIds.get(op);
    if (!byComm) {
      byComm = new Map();
      this.collIds.set(op, byComm);
    }
    let id = byComm.get(comm);
    if (id === undefined) {
      id = this.collNames.length;
      byComm.set(comm, id);
      this.collNames.push(`${op}:${comm}`);
      this.intraCount.push(-1);
      this.intraSig.push(0);
      this.intraMix.push(0);
      this.intraKeyOf.push(undefined);
    }
    return id;
  }

  /**
   * Drops the ids once they far outnumber a step's collectives (communicators renamed by restarts),
   * and gives the collectives of steps still open new ones.
   */
  private forgetCollIds(linksThisStep: number): void {
    // Against the most links a step has had: a short step (a job's last) does not drop them.
    this.maxLinks = Math.max(this.maxLinks, linksThisStep);
    if (this.collNames.length <= 1024 + 8 * this.maxLinks) return;
    const names = this.collNames;
    this.collIds.clear();
    this.collNames = [];
    this.intraCount = [];
    this.intraSig = [];
    this.intraMix = [];
    this.intraKeyOf = [];
    for (const step of [...this.open.values(), ...this.stepPool]) {
      step.linkOfColl.fill(-1);
      const L = step.links;
      for (let l = 0; l < L.size; l++) {
        if (!L.coll[l]) continue;
        const op = L.kind[l].family;
        const id = this.collId(op, names[L.collId[l]].slice(op.length + 1));
        if (id >= step.linkOfColl.length) step.linkOfColl = grown(step.linkOfColl, id + 1 + names.length, -1);
        L.collId[l] = id;
        step.linkOfColl[id] = l;
      }
    }
  }

  /** A link's kind: a job has a handful, built once rather than per link and step. */
  private kindOf(family: string, nranks: number, band: number): LinkKind {
    for (const k of this.kinds) if (k.band === band && k.nranks === nranks && k.family === family) return k;
    const kind = `${family}:${nranks}:${band}`;
    const k = { family, nranks, band, kind, kindNvlink: `${kind}:nvlink` };
    if (this.kinds.length < 64) this.kinds.push(k);
    return k;
  }

  private newLink(
    L: StepLinks,
    family: string,
    op: string,
    bytes: number,
    nranks: number | undefined,
    /** A collective (its member rails listed in the table), not a p2p edge. */
    collective: boolean,
    src: number,
    dst: number,
  ): number {
    const band = Math.round(Math.log2(Math.max(1, bytes)) / 2);
    const kind = this.kindOf(family, nranks ?? 0, band);
    return L.add(kind, bytes, busbwFactor(op, nranks ?? 2), collective, src, dst);
  }

  /**
   * Called when a step's frame of `step` events closed: judges the collectives of the step
   * before it (one step of slack for late collective reports), with that step's wall time.
   */
  onStepClosed(step: number, stepMs: number, ts: number): void {
    this.stepTimes.set(step, { stepMs, ts });
    this.closeThrough(step - 1);
    // Kept longer than open steps: a collector's reduced collectives come a few steps late.
    for (const s of this.stepTimes.keys()) if (s < step - 4 * this.cfg.maxOpenSteps) this.stepTimes.delete(s);
  }

  /** Judges everything still open (end of input or job). */
  flush(): void {
    this.closeThrough(Number.POSITIVE_INFINITY);
  }

  /**
   * Judges the open steps through `step`, oldest first. The newest open step waits until a
   * collective of a later step has come (or `maxOpenSteps` - 1 frames have closed after it): node
   * collectors send a step's reduced collectives seconds after its step events, each on its own
   * clock, so a step judged when its frame closes could be judged with part of its members, and
   * a communicator missing the member that arrived last looks slow.
   */
  private closeThrough(step: number): void {
    let latest = Number.NEGATIVE_INFINITY;
    for (const s of this.open.keys()) if (s > latest) latest = s;
    const steps = [...this.open.keys()].filter((s) => s <= step).sort((a, b) => a - b);
    for (const s of steps) {
      if (s === latest && step - s < this.cfg.maxOpenSteps - 1) break;
      const t = this.stepTimes.get(s) ?? this.lastTimes;
      if (t) {
        const links = this.open.get(s)!;
        this.judge(links, t.stepMs, t.ts, s);
        this.lastTimes = t;
      }
      // Released as soon as judged: a step's links never outlive it.
      this.release(this.open.get(s)!);
      this.open.delete(s);
    }
  }

  /** Keeps a judged step, emptied, for a later one (two at most). */
  private release(step: OpenStep): void {
    if (this.stepPool.length >= 2) return;
    step.edgeHead.fill(-1);
    const L = step.links;
    for (let l = 0; l < L.size; l++) if (L.coll[l]) step.linkOfColl[L.collId[l]] = -1;
    step.oddEdges.clear();
    step.links.reset();
    this.stepPool.push(step);
  }

  /** The row of the edge from rail `src` to rail `dst`, or -1. */
  private edgeRowOf(src: number, dst: number): number {
    let row = src < this.edgeHead.length ? this.edgeHead[src] : -1;
    while (row >= 0 && this.edges.dst[row] !== dst) row = this.edges.next[row];
    return row;
  }

  private rail(rank: number, host: string | undefined, gpu: number | undefined): number {
    const cached = rank >= 0 && rank < this.railOfRank.length ? this.railOfRank[rank] : -1;
    // An elastic restart can move a rank to another host: its rail follows the report.
    if (cached >= 0 && (host === undefined || host === this.railIds.hostName(cached))) return cached;
    const h = host ?? this.ranks.host[rank];
    const g = gpu ?? (rank < this.ranks.gpu.length ? this.ranks.gpu[rank] : -1);
    const rail = this.railIds.id(h, g);
    // Cached only once fully known (and for a plausible rank: a bogus one must not size an array).
    if (g >= 0 && h !== undefined && rank >= 0 && rank < MAX_CACHED_RANK && Number.isInteger(rank)) {
      if (rank >= this.railOfRank.length)
        this.railOfRank = grown(this.railOfRank, Math.max(rank + 1, this.railOfRank.length * 2), -1);
      this.railOfRank[rank] = rail;
    }
    return rail;
  }

  /**
   * Judges one step's links against their kind's peers and moves each rail, edge and intra-host
   * group's CUSUM on. Each phase is a method of its own, so each hot loop gets its own type
   * feedback and optimized code: a big job judges few steps of tens of thousands of links, and
   * one long function deoptimized at each phase its first call reached, step after step.
   */
  private judge(open: OpenStep, stepMs: number, ts: number, step: number): void {
    this.cumStepMs += stepMs;
    const pass = ++this.pass;
    const L = open.links;
    this.fitJudgeArrays();
    // Edges and intra-host groups in first-judged order; a later link of the same edge or key wins.
    const edgeOrder: number[] = [];
    const intraScore = new Map<string, number>();
    for (const [kind, list] of this.linksByKind(L))
      if (list.length >= this.cfg.minPeers) this.scoreKind(L, kind, list, pass, edgeOrder, intraScore);
    const pace = this.paceSetter(L, edgeOrder, intraScore, pass);
    this.judgeRails(L, pace, step, stepMs, ts);
    this.judgeEdges(L, edgeOrder, pace, step, stepMs, ts);
    this.judgeIntra(L, intraScore, pace, step, stepMs, ts);
    this.decidePairs(step, ts);
    this.forgetCollIds(L.size);
  }

  /** The judge's per-rail and per-edge-row arrays, sized to the rails and rows known. */
  private fitJudgeArrays(): void {
    if (this.accLinks.length < this.railIds.size) {
      const c = Math.max(this.railIds.size, this.accLinks.length * 2);
      this.accLinks = grown(this.accLinks, c);
      this.accScore = grown(this.accScore, c);
      this.accWorst = grown(this.accWorst, c, -1);
    }
    if (this.newPass.length < this.railIds.size) {
      const c = Math.max(this.railIds.size, this.newPass.length * 2);
      this.newPass = grown(this.newPass, c);
      this.newFirst = grown(this.newFirst, c, -1);
    }
    if (this.rowPass.length < this.edges.size) {
      this.rowPass = grown(this.rowPass, this.edges.s.length);
      this.rowLink = grown(this.rowLink, this.edges.s.length, -1);
    }
  }

  /** The step's timed links by kind, collectives first, then edges. */
  private linksByKind(L: StepLinks): Map<string, number[]> {
    const byKind = new Map<string, number[]>();
    for (let round = 1; round >= 0; round--) {
      for (let l = 0; l < L.size; l++) {
        if (L.coll[l] !== round || !(L.durMin[l] > 0 && L.durMin[l] < Number.POSITIVE_INFINITY)) continue;
        // Inside a host (NVLink) and across hosts (NIC) are different kinds, whatever their sizes.
        const intra = round ? this.intraHostKey(L, l) : undefined;
        L.intra[l] = intra;
        const kind = intra ? L.kind[l].kindNvlink : L.kind[l].kind;
        const list = byKind.get(kind);
        if (list) list.push(l);
        else byKind.set(kind, [l]);
      }
    }
    return byKind;
  }

  /**
   * Scores the links of one kind against their median log bus bandwidth and its robust spread,
   * and hands each to what it speaks for: its rails, its edge, or its intra-host group.
   */
  private scoreKind(
    L: StepLinks,
    kind: string,
    list: number[],
    pass: number,
    edgeOrder: number[],
    intraScore: Map<string, number>,
  ): void {
    const n = list.length;
    if (this.scratch.length < n) this.scratch = new Float64Array(n * 2);
    if (this.bw.length < n) this.bw = new Float64Array(n * 2);
    const bw = this.bw;
    for (let i = 0; i < n; i++) {
      const l = list[i];
      bw[i] = Math.log(((L.bytes[l] / (L.durMin[l] / 1000)) * L.factor[l]) / 1e9);
    }
    this.scratch.set(bw.subarray(0, n));
    const med = medianInPlace(this.scratch, n);
    this.scratch.set(bw.subarray(0, n));
    const spread = madSigmaInPlace(this.scratch, n, med);
    const sigma = smoothSpread(this.sigma.get(kind), spread, this.cfg);
    this.sigma.set(kind, sigma);
    for (let i = 0; i < n; i++) {
      const l = list[i];
      const z = score(med - bw[i], sigma, this.cfg);
      const measured = Math.exp(bw[i]);
      const expected = Math.exp(med);
      const durMs = L.durMin[l];
      L.z[l] = z;
      L.measured[l] = measured;
      L.expected[l] = expected;
      L.excessMs[l] = Math.max(0, durMs - durMs * (measured / expected));
      const intra = L.intra[l];
      if (intra) {
        intraScore.set(intra, l);
        continue; // no NIC traffic: it neither clears nor blames a rail
      }
      if (L.coll[l])
        for (let m = L.memberHead[l]; m >= 0; m = L.memberNext[m]) this.accumulate(L, L.memberRail[m], l);
      else this.noteEdge(L, l, pass, edgeOrder);
    }
  }

  /**
   * A p2p link: counts on both rails and is filed under its edge. An edge with a row is found by
   * its rails; one without (first seen) by its rail pair, chained per sending rail for this pass.
   */
  private noteEdge(L: StepLinks, l: number, pass: number, edgeOrder: number[]): void {
    const src = L.src[l];
    const dst = L.dst[l];
    this.accumulate(L, src, l);
    if (dst !== src) this.accumulate(L, dst, l);
    const row = this.edgeRowOf(src, dst);
    L.row[l] = row;
    if (row >= 0) {
      if (this.rowPass[row] !== pass) {
        this.rowPass[row] = pass;
        edgeOrder.push(l);
      }
      this.rowLink[row] = l;
      return;
    }
    if (this.newPass[src] !== pass) {
      this.newPass[src] = pass;
      this.newFirst[src] = -1;
    }
    let f = this.newFirst[src];
    while (f >= 0 && L.dst[f] !== dst) f = L.nextNew[f];
    if (f >= 0) L.win[f] = l;
    else {
      L.win[l] = l;
      L.nextNew[l] = this.newFirst[src];
      this.newFirst[src] = l;
      edgeOrder.push(l);
    }
  }

  /**
   * Cost: only the link that sets the pace costs anything, by its lead over the slowest link that
   * shares none of its rails (what the step would take without it), as for stragglers. Candidates
   * in order: edges, each rail's worst, intra-host groups; the first largest wins (top -1: none).
   */
  private paceSetter(L: StepLinks, edgeOrder: number[], intraScore: Map<string, number>, pass: number): Pace {
    const cands = this.candidates;
    cands.length = 0;
    for (const f of edgeOrder) cands.push(this.edgeLink(L, f));
    for (const r of this.touched) cands.push(this.accWorst[r]);
    for (const l of intraScore.values()) cands.push(l);
    let top = -1;
    for (const l of cands) if (top < 0 || L.excessMs[l] > L.excessMs[top]) top = l;
    if (top < 0) return { top, lead: 0 };
    // Each link once (a communicator is every member rail's worst), and the smaller rail set
    // walked: O(ranks) per step, where spreading each rail's link was O(ranks x group size).
    let otherMax = 0;
    for (const l of cands) {
      if (L.mark[l] === pass) continue;
      L.mark[l] = pass;
      if (!(L.excessMs[l] <= otherMax) && !L.sharesRail(l, top)) otherMax = Math.max(otherMax, L.excessMs[l]);
    }
    return { top, lead: L.excessMs[top] - otherMax };
  }

  /** Each rail the step's links touched: its CUSUM moved by its lowest score. */
  private judgeRails(L: StepLinks, { top, lead }: Pace, step: number, stepMs: number, ts: number): void {
    const touched = this.touched;
    for (const rail of touched) {
      const worst = this.accWorst[rail];
      const x = this.accScore[rail];
      // With one link, a rail's hit is its communicator's (a burst shared by every member): not a flap.
      const flapOpens = this.accLinks[rail] >= 2;
      const cost = top >= 0 && L.hasRail(top, rail) ? lead : 0;
      this.accLinks[rail] = 0;
      this.accWorst[rail] = -1;
      let row = rail < this.railRow.length ? this.railRow[rail] : -1;
      if (row < 0) {
        // A rail of ranks not yet placed (`host/-1`) gets a row only once it looks slow.
        if (!this.railIds.known(rail) && this.staysFresh(x)) continue;
        row = this.rails.add();
        this.rails.src[row] = rail;
        if (rail >= this.railRow.length)
          this.railRow = grown(this.railRow, Math.max(rail + 1, this.railRow.length * 2), -1);
        this.railRow[rail] = row;
      }
      this.stepCusum(this.rails, row, RAIL, x, flapOpens, L, worst, cost, step, stepMs, ts);
    }
    touched.length = 0;
  }

  /** Each edge of the step: its CUSUM moved by its last link's score (a row made when first needed). */
  private judgeEdges(
    L: StepLinks,
    edgeOrder: number[],
    { top, lead }: Pace,
    step: number,
    stepMs: number,
    ts: number,
  ): void {
    this.newFirst.fill(-1); // the step's links go with it
    for (const f of edgeOrder) {
      const l = this.edgeLink(L, f);
      let row = L.row[f];
      if (row >= 0) this.rowLink[row] = -1;
      else {
        // An edge to a peer not yet placed (`host/-1`, the first step) gets a row only once it looks slow.
        const src = L.src[l];
        const dst = L.dst[l];
        if ((!this.railIds.known(src) || !this.railIds.known(dst)) && this.staysFresh(L.z[l])) continue;
        row = this.edges.add();
        this.edges.src[row] = src;
        this.edges.dst[row] = dst;
        if (src >= this.edgeHead.length)
          this.edgeHead = grown(this.edgeHead, Math.max(src + 1, this.edgeHead.length * 2), -1);
        this.edges.next[row] = this.edgeHead[src];
        this.edgeHead[src] = row;
      }
      this.stepCusum(this.edges, row, EDGE, L.z[l], false, L, l, l === top ? lead : 0, step, stepMs, ts);
    }
  }

  /** Each intra-host (NVLink) group of the step: its CUSUM moved by its link's score. */
  private judgeIntra(
    L: StepLinks,
    intraScore: Map<string, number>,
    { top, lead }: Pace,
    step: number,
    stepMs: number,
    ts: number,
  ): void {
    for (const [key, l] of intraScore) {
      let row = this.intraRow.get(key);
      if (row === undefined) {
        row = this.intra.add();
        this.intraRow.set(key, row);
        this.intraKeys.push(key);
      }
      this.stepCusum(this.intra, row, INTRA, L.z[l], false, L, l, l === top ? lead : 0, step, stepMs, ts);
    }
  }

  /** The link that speaks for an edge this step (its last), from the edge's first link. */
  private edgeLink(L: StepLinks, first: number): number {
    return L.row[first] >= 0 ? this.rowLink[L.row[first]] : L.win[first];
  }

  private accumulate(L: StepLinks, rail: number, l: number): void {
    if (this.accLinks[rail] === 0) {
      this.touched.push(rail);
      this.accLinks[rail] = 1;
      this.accScore[rail] = L.z[l];
      this.accWorst[rail] = l;
      return;
    }
    this.accLinks[rail]++;
    if (L.z[l] < this.accScore[rail]) this.accScore[rail] = L.z[l];
    if (L.excessMs[l] > L.excessMs[this.accWorst[rail]]) this.accWorst[rail] = l;
  }

  /** Whether a fresh CUSUM row would stay untouched by a step with this score (so needs no row). */
  private staysFresh(x: number): boolean {
    return rise(0, x, this.cfg) === 0 && !(x >= this.cfg.flapZ);
  }

  /** `nvlink:host/g+g+...` when every rail of a collective is on one host (two or more GPUs), else undefined. */
  private intraHostKey(L: StepLinks, l: number): string | undefined {
    const id = L.collId[l];
    const n = L.memberCount[l];
    if (
      this.intraCount[id] === n &&
      this.intraSig[id] === L.memberSig[l] &&
      this.intraMix[id] === L.memberMix[l]
    )
      return this.intraKeyOf[id];
    const key = this.buildIntraHostKey(L, l);
    this.intraCount[id] = n;
    this.intraSig[id] = L.memberSig[l];
    this.intraMix[id] = L.memberMix[l];
    this.intraKeyOf[id] = key;
    return key;
  }

  private buildIntraHostKey(L: StepLinks, l: number): string | undefined {
    if (L.memberCount[l] < 2) return undefined;
    let host = -1;
    for (let m = L.memberHead[l]; m >= 0; m = L.memberNext[m]) {
      const h = this.railIds.host[L.memberRail[m]];
      if (host === -1) host = h;
      else if (h !== host) return undefined;
    }
    const gpus: number[] = [];
    for (let m = L.memberHead[l]; m >= 0; m = L.memberNext[m]) gpus.push(this.railIds.gpu[L.memberRail[m]]);
    gpus.sort((a, b) => a - b);
    return `nvlink:${this.railIds.hostNames[host]}/${gpus.join('+')}`;
  }

  /** An NVLink XID (or error counter) named this GPU: a slow intra-host group through it is named by it. */
  nvlinkHint(host: string, gpu: number): void {
    this.nvlinkHints.set(host, gpu);
  }

  private stepCusum(
    t: CusumTable,
    i: number,
    type: number,
    x: number,
    /** Whether a hit may open this link on its own (rails with several links, not single edges). */
    flapOpens: boolean,
    /** The step's links, and the one that speaks for this row (its worst). */
    L: StepLinks,
    worst: number,
    costMs: number,
    step: number,
    stepMs: number,
    ts: number,
  ): void {
    const before = t.s[i];
    const flapBefore = t.flap[i];
    t.s[i] = rise(t.s[i], x, this.cfg);
    if (x >= this.cfg.flapZ) {
      if (t.flagged[i] && Number.isFinite(t.lastHit[i])) {
        const c = t.act[i]; // a flagged row is active
        t.maxGap[c] = Math.max(t.maxGap[c], step - t.lastHit[i]);
      }
      t.lastHit[i] = step;
      t.flap[i] += this.flapHit;
    } else {
      t.flap[i] = Math.max(0, t.flap[i] + this.flapMiss);
    }
    if (!t.flagged[i]) {
      if (t.s[i] === 0 && t.flap[i] === 0) {
        t.release(i);
        return;
      }
      if (before === 0 && flapBefore === 0) {
        const c = t.activate(i);
        t.onsetStep[c] = step;
        t.onsetTs[c] = ts - stepMs;
        t.n[c] = 0;
        t.sumMeasured[c] = 0;
        t.sumExpected[c] = 0;
        t.sumExcessMs[c] = 0;
        t.stepMsAtOnset[c] = this.cumStepMs - stepMs;
        t.hits[c] = 0;
        t.hitMeasured[c] = 0;
        t.hitExpected[c] = 0;
      }
    }
    const c = t.act[i];
    t.n[c]++;
    t.sumMeasured[c] += L.measured[worst];
    t.sumExpected[c] += L.expected[worst];
    t.sumExcessMs[c] += costMs;
    if (x >= this.cfg.flapZ) {
      t.hits[c]++;
      t.hitMeasured[c] += L.measured[worst];
      t.hitExpected[c] += L.expected[worst];
    }
    t.worstKey[c] = L.coll[worst] ? L.key[worst] : railPair(L.src[worst], L.dst[worst]);
    t.worstKind[c] = L.kind[worst].kind;
    if (t.flagged[i]) {
      t.clear[c] = fall(t.clear[c], x, this.cfg);
      const quiet = step - t.lastHit[i] >= Math.max(this.cfg.flapQuietSteps, 3 * t.maxGap[c]);
      if (t.clear[c] >= this.cfg.resolveH && quiet) this.resolve(t, i, ts);
      else {
        const id = t.ids.get(i);
        if (id) this.log.update(id, ts, this.draft(this.view(t, i), this.keyOf(type, i)));
      }
    } else if (t.s[i] >= this.cfg.h || (flapOpens && t.flap[i] >= this.cfg.flapH)) {
      t.flagged[i] = 1;
      t.clear[c] = 0;
      t.maxGap[c] = 0;
      if (type === EDGE) {
        if (Number.isNaN(t.pendingSince[c])) this.addPending(i);
        t.pendingSince[c] = step;
      } else this.openRail(t, i, this.keyOf(type, i), ts);
    }
  }

  /** Keeps `pending` in row order: the order edges were first judged, as the old map iterated them. */
  private addPending(row: number): void {
    const p = this.pending;
    let j = p.length;
    while (j > 0 && p[j - 1] > row) j--;
    p.splice(j, 0, row);
  }

  /** A row's name: `host/gpu` (rail), `host/gpu>host/gpu` (edge), `nvlink:...` (intra-host group). */
  private keyOf(type: number, i: number): string {
    if (type === INTRA) return this.intraKeys[i];
    if (type === EDGE)
      return `${this.railIds.name(this.edges.src[i])}>${this.railIds.name(this.edges.dst[i])}`;
    return this.railName(i);
  }

  /** A rail row keeps its rail id in `src`. */
  private railName(row: number): string {
    return this.railIds.name(this.rails.src[row]);
  }

  /** A row as the finding text reads it. */
  private view(t: CusumTable, i: number): Cusum {
    const c = t.act[i]; // rows with a finding are active
    const key = t.worstKey[c];
    return {
      onsetStep: t.onsetStep[c],
      onsetTs: t.onsetTs[c],
      n: t.n[c],
      sumMeasured: t.sumMeasured[c],
      sumExpected: t.sumExpected[c],
      sumExcessMs: t.sumExcessMs[c],
      stepMsAtOnset: t.stepMsAtOnset[c],
      hits: t.hits[c],
      hitMeasured: t.hitMeasured[c],
      hitExpected: t.hitExpected[c],
      worst:
        key === undefined
          ? undefined
          : {
              key:
                typeof key === 'number'
                  ? `p2p:${this.railIds.name(pairSrc(key))}>${this.railIds.name(pairDst(key))}`
                  : key,
              kind: t.worstKind[c],
            },
    };
  }

  private openRail(t: CusumTable, i: number, rail: string, ts: number): void {
    const [host, gpu] = rail.startsWith('nvlink:') ? this.intraWhere(rail) : splitRail(rail);
    const id = findingId('slow_link', this.job, host, gpu, undefined, t.onsetStep[t.act[i]]);
    t.ids.set(i, id);
    this.log.openFinding(id, ts, this.draft(this.view(t, i), rail));
  }

  /** Slow edges whose rails were cleared are pair-specific links. */
  private decidePairs(step: number, ts: number): void {
    if (this.pending.length === 0) return;
    const t = this.edges;
    const keep: number[] = [];
    for (const i of this.pending) {
      const c = t.act[i]; // a pending row is active
      if (step - t.pendingSince[c] < this.cfg.pairWaitSteps) {
        keep.push(i);
        continue;
      }
      t.pendingSince[c] = Number.NaN;
      const srcRow = t.src[i] < this.railRow.length ? this.railRow[t.src[i]] : -1;
      const dstRow = t.dst[i] < this.railRow.length ? this.railRow[t.dst[i]] : -1;
      if ((srcRow >= 0 && this.rails.flagged[srcRow]) || (dstRow >= 0 && this.rails.flagged[dstRow]))
        continue; // the rail explains it
      // A rail with recent hits may yet open (a flapping NIC): wait for it rather than blame the pair.
      if ((srcRow >= 0 && this.rails.flap[srcRow] > 0) || (dstRow >= 0 && this.rails.flap[dstRow] > 0)) {
        t.pendingSince[c] = step - this.cfg.pairWaitSteps + 1;
        keep.push(i);
        continue;
      }
      const edge = this.keyOf(EDGE, i);
      const src = this.railIds.name(t.src[i]);
      const [host, gpu] = splitRail(src);
      const id = findingId(
        'slow_link',
        this.job,
        host,
        gpu,
        splitRail(this.railIds.name(t.dst[i]))[0],
        t.onsetStep[c],
      );
      t.ids.set(i, id);
      this.log.openFinding(id, ts, this.draft(this.view(t, i), edge));
    }
    this.pending = keep;
  }

  private resolve(t: CusumTable, i: number, ts: number): void {
    const id = t.ids.get(i);
    if (id) this.log.resolve(id, ts, { summary: 'link bandwidth back in line with its peers.' });
    t.ids.delete(i);
    t.flagged[i] = 0;
    t.s[i] = 0;
    t.clear[t.act[i]] = 0;
    t.flap[i] = 0;
    t.release(i);
  }

  /** Host and GPU of an intra-host group: the lower of a pair, or the GPU an NVLink XID named. */
  private intraWhere(key: string): [string, number | undefined, number[]] {
    const i = key.lastIndexOf('/');
    const host = key.slice('nvlink:'.length, i);
    const gpus = key
      .slice(i + 1)
      .split('+')
      .map(Number);
    const hint = this.nvlinkHints.get(host);
    const gpu = gpus.length <= 2 ? gpus[0] : hint !== undefined && gpus.includes(hint) ? hint : undefined;
    return [host, gpu, gpus];
  }

  private draft(st: Cusum, key: string) {
    if (key.startsWith('nvlink:')) return this.draftIntra(st, key);
    const pair = key.includes('>');
    const [srcRail, dstRail] = pair ? key.split('>') : [key, undefined];
    const [host, gpu] = splitRail(srcRail);
    const peerHost = dstRail ? splitRail(dstRail)[0] : undefined;
    const n = Math.max(1, st.n);
    // Flapping (slow on under half its steps): the figures of its slow steps, and how often.
    const flapping = st.hits > 0 && st.hits < 0.5 * n;
    const measured = flapping ? st.hitMeasured / st.hits : st.sumMeasured / n;
    const expected = flapping ? st.hitExpected / st.hits : st.sumExpected / n;
    const span = this.cumStepMs - st.stepMsAtOnset;
    const cost = span > 0 ? Math.min(100, (100 * st.sumExcessMs) / span) : 0;
    const where = pair ? `the link ${host}/${gpu} -> ${peerHost}` : `NIC rail ${gpu} of ${host}`;
    const what = pair
      ? 'only this pair is slow; each end is fine with its other peers'
      : 'every collective and p2p transfer through it is slow';
    const when = flapping
      ? ` on ${st.hits} of ${st.n} steps (about 1 in ${round(st.n / st.hits, 0)}, flapping)`
      : '';
    return {
      type: 'slow_link',
      job: this.job,
      host,
      gpu,
      peer_host: peerHost,
      severity: severityForCost(cost),
      onset_ts: st.onsetTs,
      est_cost_pct: costFigure(cost),
      action: cost >= 2 ? ('cordon' as const) : ('watch' as const),
      evidence: {
        onset_step: st.onsetStep,
        measured_busbw_gbps: round(measured, 2),
        expected_busbw_gbps: round(expected, 2),
        bandwidth_ratio: round(measured / expected, 3),
        slowest: st.worst?.key,
        kind: st.worst?.kind,
        steps: st.n,
        slow_steps: st.hits,
        flapping,
        gpu_hours_per_day: round((cost / 100) * this.ranks.size * 24, 1),
      },
      summary:
        `${where} moves ${round(measured, 1)} GB/s bus bandwidth where its peers move ${round(expected, 1)} GB/s${when}; ` +
        `${what}; ${costClause(cost)}.`,
    };
  }

  private draftIntra(st: Cusum, key: string) {
    const [host, gpu, gpus] = this.intraWhere(key);
    const n = Math.max(1, st.n);
    const measured = st.sumMeasured / n;
    const expected = st.sumExpected / n;
    const span = this.cumStepMs - st.stepMsAtOnset;
    const cost = span > 0 ? Math.min(100, (100 * st.sumExcessMs) / span) : 0;
    const which =
      gpus.length === 2
        ? `between GPUs ${gpus[0]} and ${gpus[1]}`
        : gpu !== undefined
          ? `of GPU ${gpu} (named by an NVLink error; group GPUs ${gpus.join(', ')})`
          : `of the group of GPUs ${gpus.join(', ')}`;
    return {
      type: 'slow_link',
      job: this.job,
      host,
      gpu,
      severity: severityForCost(cost),
      onset_ts: st.onsetTs,
      est_cost_pct: costFigure(cost),
      action: cost >= 2 ? ('cordon' as const) : ('watch' as const),
      evidence: {
        link: 'nvlink',
        gpus,
        onset_step: st.onsetStep,
        measured_busbw_gbps: round(measured, 2),
        expected_busbw_gbps: round(expected, 2),
        bandwidth_ratio: round(measured / expected, 3),
        slowest: st.worst?.key,
        kind: st.worst?.kind,
        steps: st.n,
        gpu_hours_per_day: round((cost / 100) * this.ranks.size * 24, 1),
      },
      summary:
        `the NVLink ${which} on ${host} moves ${round(measured, 1)} GB/s bus bandwidth where the same groups on other hosts move ${round(expected, 1)} GB/s; ` +
        `${costClause(cost)}.`,
    };
  }

  /** Open incidents (rails, pairs, NVLink groups), for linking and summaries. */
  openIncidents(): { id: string; key: string }[] {
    const out: { id: string; key: string }[] = [];
    for (const [i, id] of this.rails.ids) out.push({ id, key: this.keyOf(RAIL, i) });
    for (const [i, id] of this.edges.ids) out.push({ id, key: this.keyOf(EDGE, i) });
    for (const [i, id] of this.intra.ids) out.push({ id, key: this.keyOf(INTRA, i) });
    return out;
  }
}

function splitRail(rail: string): [string, number | undefined] {
  const i = rail.lastIndexOf('/');
  const gpu = Number(rail.slice(i + 1));
  return [rail.slice(0, i), Number.isInteger(gpu) && gpu >= 0 ? gpu : undefined];
}
