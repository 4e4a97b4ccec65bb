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

import { round } from '../../core/round.js';
import type { CollectiveEvent } from '../../schema/events.js';
import { grown } from '../arrays.js';
import { type CusumConfig, fall, rise, score, smoothSpread } from '../cusum.js';
import { type FindingLog, findingId, severityForCost } from '../findings.js';
import { madSigmaInPlace, medianInPlace } from '../robust.js';
import type { RankTable } from '../steps.js';
import { busbwFactor } from './busbw.js';
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

/** A communicator or p2p edge during one step: lives until its step is judged. */
interface Link {
  /** `op:comm` for a collective; a p2p edge's rail pair (its name is built only for a finding). */
  key: string | number;
  kind: string;
  /** The kind when every member is on one host (compared with NVLink groups only). */
  kindNvlink: string;
  op: string;
  nranks: number;
  bytes: number;
  /** Shortest duration a member reported: the one that arrived last waited for nobody. */
  durMin: number;
  /** A collective's rails (rail ids); undefined for a p2p edge, whose rails are src and dst. */
  rails: Set<number> | undefined;
  src: number;
  dst: number;
  /** For a collective whose members are all on one host: its `nvlink:` key. */
  intra: string | undefined;
  /** Set when judged: score, bandwidth measured and expected, time lost. */
  z: number;
  measured: number;
  expected: number;
  excessMs: number;
  /** The judge pass that last counted this link (instead of a Set of links per step). */
  mark: number;
  /** p2p: the receiving rank, the next edge of the same sender this step (an index, -1 at the end), and the edge's row (-1: none yet). */
  to: number;
  next: number;
  row: number;
  /** p2p without a row, during a judge pass: the link its edge is judged by, and the next new edge of the same sending rail. */
  win: Link | undefined;
  nextNew: Link | undefined;
}

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

interface OpenStep {
  /** Collectives by op, then communicator: no `op:comm` string built per event. */
  colls: Map<string, Map<string, Link>>;
  collList: Link[];
  /** p2p edges: the first of each sending rank (an index into edgeList, -1 for none), chained by `next`. */
  edgeHead: Int32Array;
  edgeList: Link[];
  /** Edges of ranks too large to index (not valid input, but still counted). */
  oddEdges: Map<number, Link>;
}

const RAIL = 0;
const EDGE = 1;
const INTRA = 2;
/** Ranks past this are looked up without the per-rank cache. */
const MAX_CACHED_RANK = 1 << 24;
/** Capacity of a per-rank index that holds `rank`: doubling, at least 64. */
const indexOf = (rank: number): number => Math.max(64, 2 ** Math.ceil(Math.log2(rank + 1)));

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
  private rowLink: (Link | undefined)[] = [];
  private rowPass = new Int32Array(64);
  /** During a judge pass: edges without a row, by sending rail (`newPass` says which pass set `newFirst`). */
  private newPass = new Int32Array(64);
  private newFirst: (Link | undefined)[] = [];
  /** Released steps' rank indexes, reused. */
  private readonly headPool: Int32Array[] = [];
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
  private accWorst: (Link | undefined)[] = [];
  private touched: number[] = [];
  private pass = 0;
  private readonly kinds: {
    family: string;
    nranks: number;
    band: number;
    kind: string;
    kindNvlink: string;
  }[] = [];

  constructor(
    private readonly job: string,
    private readonly ranks: RankTable,
    private readonly log: FindingLog,
    private readonly cfg: SlowLinkConfig = SLOWLINK_DEFAULTS,
  ) {}

  add(e: CollectiveEvent): void {
    let step = this.open.get(e.step);
    if (!step) {
      if (this.open.size >= this.cfg.maxOpenSteps) this.open.delete(Math.min(...this.open.keys()));
      step = {
        colls: new Map(),
        collList: [],
        edgeHead: this.rankIndex(),
        edgeList: [],
        oddEdges: new Map(),
      };
      this.open.set(e.step, step);
    }
    const rail = this.rail(e.rank, e.host, e.gpu);
    if (e.op === 'send' || e.op === 'recv') {
      if (e.peer === undefined) return;
      // Both ends report the same transfer: key the edge by sender and receiver rank.
      const [from, to] = e.op === 'send' ? [e.rank, e.peer] : [e.peer, e.rank];
      const indexed = from >= 0 && from < MAX_CACHED_RANK && Number.isInteger(from);
      if (indexed && from >= step.edgeHead.length) step.edgeHead = grown(step.edgeHead, indexOf(from), -1);
      let link: Link | undefined;
      if (indexed) {
        let i = step.edgeHead[from];
        while (i >= 0 && step.edgeList[i].to !== to) i = step.edgeList[i].next;
        link = i >= 0 ? step.edgeList[i] : undefined;
      } else link = step.oddEdges.get(from * 1_048_576 + to);
      if (!link) {
        const peerRail = this.rail(e.peer, e.peer_host, undefined);
        const [src, dst] = e.op === 'send' ? [rail, peerRail] : [peerRail, rail];
        link = this.newLink(railPair(src, dst), 'p2p', e, undefined, src, dst);
        link.to = to;
        if (indexed) {
          link.next = step.edgeHead[from];
          step.edgeHead[from] = step.edgeList.length;
        } else step.oddEdges.set(from * 1_048_576 + to, link);
        step.edgeList.push(link);
      }
      if (e.dur_ms < link.durMin) link.durMin = e.dur_ms;
      return;
    }
    let byComm = step.colls.get(e.op);
    if (!byComm) {
      byComm = new Map();
      step.colls.set(e.op, byComm);
    }
    let link = byComm.get(e.comm);
    if (!link) {
      link = this.newLink(`${e.op}:${e.comm}`, e.op, e, new Set(), -1, -1);
      byComm.set(e.comm, link);
      step.collList.push(link);
    }
    if (e.dur_ms < link.durMin) link.durMin = e.dur_ms;
    link.rails!.add(rail);
  }

  /** A link's kind: a job has a handful, built once rather than per link and step. */
  private kindOf(family: string, nranks: number, band: number): { kind: string; kindNvlink: string } {
    for (const k of this.kinds) if (k.band === band && k.nranks === nranks && k.family === family) return k;
    const kind = `${family}:${nranks}:${band}`;
    const k = { family, nranks, band, kind, kindNvlink: `${kind}:nvlink` };
    if (this.kinds.length < 64) this.kinds.push(k);
    return k;
  }

  private newLink(
    key: string | number,
    family: string,
    e: CollectiveEvent,
    rails: Set<number> | undefined,
    src: number,
    dst: number,
  ): Link {
    const band = Math.round(Math.log2(Math.max(1, e.bytes)) / 2);
    const k = this.kindOf(family, e.nranks ?? 0, band);
    return {
      key,
      kind: k.kind,
      kindNvlink: k.kindNvlink,
      op: e.op,
      nranks: e.nranks ?? 2,
      bytes: e.bytes,
      durMin: Number.POSITIVE_INFINITY,
      rails,
      src,
      dst,
      intra: undefined, // set by judge(); every field present from the start: one hidden class
      z: 0,
      measured: 0,
      expected: 0,
      excessMs: 0,
      mark: 0,
      to: -1,
      next: -1,
      row: -1,
      win: undefined,
      nextNew: undefined,
    };
  }

  /**
   * Called when a step's frame of `step` events closed: judges the collectives of the step
   * before it (one step of slack for late collective reports), with that step's wall time.
   */
  onStepClosed(step: number, stepMs: number, ts: number): void {
    this.stepTimes.set(step, { stepMs, ts });
    this.closeThrough(step - 1);
    for (const s of this.stepTimes.keys()) if (s < step - this.cfg.maxOpenSteps) this.stepTimes.delete(s);
  }

  /** Judges everything still open (end of input or job). */
  flush(): void {
    this.closeThrough(Number.POSITIVE_INFINITY);
  }

  private closeThrough(step: number): void {
    const steps = [...this.open.keys()].filter((s) => s <= step).sort((a, b) => a - b);
    for (const s of steps) {
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

  /** A per-step index by sending rank, all -1: reused from released steps. */
  private rankIndex(): Int32Array {
    return this.headPool.pop() ?? new Int32Array(indexOf(this.railOfRank.length - 1)).fill(-1);
  }

  private release(step: OpenStep): void {
    step.edgeHead.fill(-1);
    if (this.headPool.length < 2) this.headPool.push(step.edgeHead);
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

  private judge(open: OpenStep, stepMs: number, ts: number, step: number): void {
    this.cumStepMs += stepMs;
    const pass = ++this.pass;
    // Per kind: the median log bus bandwidth and its robust spread.
    const byKind = new Map<string, Link[]>();
    const sort = (l: Link) => {
      if (!(l.durMin > 0 && l.durMin < Number.POSITIVE_INFINITY)) return;
      // Inside a host (NVLink) and across hosts (NIC) are different kinds, whatever their sizes.
      l.intra = l.rails ? this.intraHostKey(l.rails) : undefined;
      const kind = l.intra ? l.kindNvlink : l.kind;
      const list = byKind.get(kind);
      if (list) list.push(l);
      else byKind.set(kind, [l]);
    };
    for (const l of open.collList) sort(l);
    for (const l of open.edgeList) sort(l);
    if (this.accLinks.length < this.railIds.size) {
      const c = Math.max(this.railIds.size, this.accLinks.length * 2);
      this.accLinks = grown(this.accLinks, c);
      this.accScore = grown(this.accScore, c);
    }
    const touched = this.touched;
    // Edges and intra-host groups in first-judged order; a later link of the same edge or key wins.
    // An edge with a row is found by its rails; one without (first seen) by its rail pair.
    const edgeOrder: Link[] = [];
    if (this.newPass.length < this.railIds.size) {
      this.newPass = grown(this.newPass, Math.max(this.railIds.size, this.newPass.length * 2));
      while (this.newFirst.length < this.newPass.length) this.newFirst.push(undefined);
    }
    if (this.rowPass.length < this.edges.size) this.rowPass = grown(this.rowPass, this.edges.s.length);
    while (this.rowLink.length < this.edges.size) this.rowLink.push(undefined);
    const intraScore = new Map<string, Link>();
    for (const [kind, list] of byKind) {
      const n = list.length;
      if (n < this.cfg.minPeers) continue;
      if (this.scratch.length < n) this.scratch = new Float64Array(n * 2);
      if (this.bw.length < n) this.bw = new Float64Array(n * 2);
      const bw = this.bw;
      for (let i = 0; i < n; i++) {
        const l = list[i];
        bw[i] = Math.log(((l.bytes / (l.durMin / 1000)) * busbwFactor(l.op, l.nranks)) / 1e9);
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
        const durMs = l.durMin;
        l.z = z;
        l.measured = measured;
        l.expected = expected;
        l.excessMs = Math.max(0, durMs - durMs * (measured / expected));
        if (l.intra) {
          intraScore.set(l.intra, l);
          continue; // no NIC traffic: it neither clears nor blames a rail
        }
        if (l.rails) for (const r of l.rails) this.accumulate(r, l);
        else {
          this.accumulate(l.src, l);
          if (l.dst !== l.src) this.accumulate(l.dst, l);
          const row = this.edgeRowOf(l.src, l.dst);
          l.row = row;
          if (row >= 0) {
            if (this.rowPass[row] !== pass) {
              this.rowPass[row] = pass;
              edgeOrder.push(l);
            }
            this.rowLink[row] = l;
          } else {
            // Edges without a row yet, chained per sending rail for this pass.
            let f = this.newPass[l.src] === pass ? this.newFirst[l.src] : undefined;
            if (this.newPass[l.src] !== pass) {
              this.newPass[l.src] = pass;
              this.newFirst[l.src] = undefined;
            }
            while (f && f.dst !== l.dst) f = f.nextNew;
            if (f) f.win = l;
            else {
              l.win = l;
              l.nextNew = this.newFirst[l.src];
              this.newFirst[l.src] = l;
              edgeOrder.push(l);
            }
          }
        }
      }
    }
    // Cost: only the link that sets the pace costs anything, by its lead over the slowest link
    // that shares none of its rails (what the step would take without it), as for stragglers.
    // Candidates in order: edges, each rail's worst, intra-host groups; the first largest wins.
    let top: Link | undefined;
    const consider = (l: Link) => {
      if (!top || l.excessMs > top.excessMs) top = l;
    };
    const edgeLink = (first: Link) => (first.row >= 0 ? this.rowLink[first.row]! : first.win!);
    for (const f of edgeOrder) consider(edgeLink(f));
    for (const r of touched) consider(this.accWorst[r]!);
    for (const l of intraScore.values()) consider(l);
    let lead = 0;
    if (top) {
      // Each link once (a communicator is every member rail's worst), and the smaller rail set
      // walked: O(ranks) per step, where spreading each rail's link was O(ranks x group size).
      let otherMax = 0;
      const t = top;
      const other = (l: Link) => {
        if (l.mark === pass) return;
        l.mark = pass;
        if (!(l.excessMs <= otherMax) && !sharesRail(l, t)) otherMax = Math.max(otherMax, l.excessMs);
      };
      for (const f of edgeOrder) other(edgeLink(f));
      for (const r of touched) other(this.accWorst[r]!);
      for (const l of intraScore.values()) other(l);
      lead = t.excessMs - otherMax;
    }
    const paceCost = (link: Link) => (top && link === top ? lead : 0);
    for (const rail of touched) {
      const worst = this.accWorst[rail]!;
      const x = this.accScore[rail];
      // With one link, a rail's hit is its communicator's (a burst shared by every member): not a flap.
      const flapOpens = this.accLinks[rail] >= 2;
      const cost = top && hasRail(top, rail) ? lead : 0;
      this.accLinks[rail] = 0;
      this.accWorst[rail] = undefined;
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
      this.stepCusum(this.rails, row, RAIL, x, flapOpens, worst, cost, step, stepMs, ts);
    }
    touched.length = 0;
    this.newFirst.fill(undefined); // the step's links go with it
    for (const f of edgeOrder) {
      const l = edgeLink(f);
      let row = f.row;
      if (row >= 0) this.rowLink[row] = undefined;
      else {
        // An edge to a peer not yet placed (`host/-1`, the first step) gets a row only once it looks slow.
        if ((!this.railIds.known(l.src) || !this.railIds.known(l.dst)) && this.staysFresh(l.z)) continue;
        row = this.edges.add();
        this.edges.src[row] = l.src;
        this.edges.dst[row] = l.dst;
        if (l.src >= this.edgeHead.length)
          this.edgeHead = grown(this.edgeHead, Math.max(l.src + 1, this.edgeHead.length * 2), -1);
        this.edges.next[row] = this.edgeHead[l.src];
        this.edgeHead[l.src] = row;
      }
      this.stepCusum(this.edges, row, EDGE, l.z, false, l, paceCost(l), step, stepMs, ts);
    }
    for (const [key, l] of intraScore) {
      let row = this.intraRow.get(key);
      if (row === undefined) {
        row = this.intra.add();
        this.intraRow.set(key, row);
        this.intraKeys.push(key);
      }
      this.stepCusum(this.intra, row, INTRA, l.z, false, l, paceCost(l), step, stepMs, ts);
    }
    this.decidePairs(step, ts);
  }

  private accumulate(rail: number, l: Link): void {
    if (this.accLinks[rail] === 0) {
      this.touched.push(rail);
      this.accLinks[rail] = 1;
      this.accScore[rail] = l.z;
      this.accWorst[rail] = l;
      return;
    }
    this.accLinks[rail]++;
    if (l.z < this.accScore[rail]) this.accScore[rail] = l.z;
    if (l.excessMs > this.accWorst[rail]!.excessMs) this.accWorst[rail] = l;
  }

  /** Whether a fresh CUSUM row would stay untouched by a step with this score (so needs no row). */
  private staysFresh(x: number): boolean {
    return rise(0, x, this.cfg) === 0 && !(x >= this.cfg.flapZ);
  }

  /** `nvlink:host/g+g+...` when every rail of a collective is on one host (two or more GPUs), else undefined. */
  private intraHostKey(rails: Set<number>): string | undefined {
    if (rails.size < 2) return undefined;
    let host = -1;
    for (const r of rails) {
      const h = this.railIds.host[r];
      if (host === -1) host = h;
      else if (h !== host) return undefined;
    }
    const gpus: number[] = [];
    for (const r of rails) gpus.push(this.railIds.gpu[r]);
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
    worst: Link,
    costMs: number,
    step: number,
    stepMs: number,
    ts: number,
  ): void {
    const before = t.s[i];
    const flapBefore = t.flap[i];
    t.s[i] = rise(t.s[i], x, this.cfg);
    if (x >= this.cfg.flapZ) {
      if (t.flagged[i] && Number.isFinite(t.lastHit[i]))
        t.maxGap[i] = Math.max(t.maxGap[i], step - t.lastHit[i]);
      t.lastHit[i] = step;
      t.flap[i] += Math.log(this.cfg.flapP1 / this.cfg.flapP0);
    } else {
      t.flap[i] = Math.max(0, t.flap[i] + Math.log((1 - this.cfg.flapP1) / (1 - this.cfg.flapP0)));
    }
    if (!t.flagged[i]) {
      if (t.s[i] === 0 && t.flap[i] === 0) return;
      if (before === 0 && flapBefore === 0) {
        t.onsetStep[i] = step;
        t.onsetTs[i] = ts - stepMs;
        t.n[i] = 0;
        t.sumMeasured[i] = 0;
        t.sumExpected[i] = 0;
        t.sumExcessMs[i] = 0;
        t.stepMsAtOnset[i] = this.cumStepMs - stepMs;
        t.hits[i] = 0;
        t.hitMeasured[i] = 0;
        t.hitExpected[i] = 0;
      }
    }
    t.n[i]++;
    t.sumMeasured[i] += worst.measured;
    t.sumExpected[i] += worst.expected;
    t.sumExcessMs[i] += costMs;
    if (x >= this.cfg.flapZ) {
      t.hits[i]++;
      t.hitMeasured[i] += worst.measured;
      t.hitExpected[i] += worst.expected;
    }
    t.worstKey[i] = worst.key;
    t.worstKind[i] = worst.kind;
    if (t.flagged[i]) {
      t.clear[i] = fall(t.clear[i], x, this.cfg);
      const quiet = step - t.lastHit[i] >= Math.max(this.cfg.flapQuietSteps, 3 * t.maxGap[i]);
      if (t.clear[i] >= this.cfg.resolveH && quiet) this.resolve(t, i, ts);
      else {
        const id = t.ids.get(i);
        if (id) this.log.update(id, ts, this.draft(this.view(t, i), this.keyOf(type, i)));
      }
    } else if (t.s[i] >= this.cfg.h || (flapOpens && t.flap[i] >= this.cfg.flapH)) {
      t.flagged[i] = 1;
      t.clear[i] = 0;
      t.maxGap[i] = 0;
      if (type === EDGE) {
        if (Number.isNaN(t.pendingSince[i])) this.addPending(i);
        t.pendingSince[i] = step;
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
    const key = t.worstKey[i];
    return {
      onsetStep: t.onsetStep[i],
      onsetTs: t.onsetTs[i],
      n: t.n[i],
      sumMeasured: t.sumMeasured[i],
      sumExpected: t.sumExpected[i],
      sumExcessMs: t.sumExcessMs[i],
      stepMsAtOnset: t.stepMsAtOnset[i],
      hits: t.hits[i],
      hitMeasured: t.hitMeasured[i],
      hitExpected: t.hitExpected[i],
      worst:
        key === undefined
          ? undefined
          : {
              key:
                typeof key === 'number'
                  ? `p2p:${this.railIds.name(pairSrc(key))}>${this.railIds.name(pairDst(key))}`
                  : key,
              kind: t.worstKind[i],
            },
    };
  }

  private openRail(t: CusumTable, i: number, rail: string, ts: number): void {
    const [host, gpu] = rail.startsWith('nvlink:') ? this.intraWhere(rail) : splitRail(rail);
    const id = findingId('slow_link', this.job, host, gpu, undefined, t.onsetStep[i]);
    t.ids.set(i, id);
    this.log.openFinding(id, ts, this.draft(this.view(t, i), rail));
  }

  /** Slow edges whose rails were cleared are pair-specific links. */
  private decidePairs(step: number, ts: number): void {
    if (this.pending.length === 0) return;
    const t = this.edges;
    const keep: number[] = [];
    for (const i of this.pending) {
      if (step - t.pendingSince[i] < this.cfg.pairWaitSteps) {
        keep.push(i);
        continue;
      }
      t.pendingSince[i] = Number.NaN;
      const srcRow = t.src[i] < this.railRow.length ? this.railRow[t.src[i]] : -1;
      const dstRow = t.dst[i] < this.railRow.length ? this.railRow[t.dst[i]] : -1;
      if ((srcRow >= 0 && this.rails.flagged[srcRow]) || (dstRow >= 0 && this.rails.flagged[dstRow]))
        continue; // the rail explains it
      // A rail with recent hits may yet open (a flapping NIC): wait for it rather than blame the pair.
      if ((srcRow >= 0 && this.rails.flap[srcRow] > 0) || (dstRow >= 0 && this.rails.flap[dstRow] > 0)) {
        t.pendingSince[i] = step - this.cfg.pairWaitSteps + 1;
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
        t.onsetStep[i],
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
    t.clear[i] = 0;
    t.flap[i] = 0;
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
      est_cost_pct: round(cost, 2),
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
        `${what}; costs the job ~${round(cost, 1)}% of its throughput.`,
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
      est_cost_pct: round(cost, 2),
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
        `costs the job ~${round(cost, 1)}% of its throughput.`,
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

function hasRail(l: Link, rail: number): boolean {
  return l.rails ? l.rails.has(rail) : l.src === rail || l.dst === rail;
}

function railCount(l: Link): number {
  return l.rails ? l.rails.size : l.src === l.dst ? 1 : 2;
}

function sharesRail(a: Link, b: Link): boolean {
  const [small, large] = railCount(a) <= railCount(b) ? [a, b] : [b, a];
  if (!small.rails) return hasRail(large, small.src) || hasRail(large, small.dst);
  for (const r of small.rails) if (hasRail(large, r)) return true;
  return false;
}

function splitRail(rail: string): [string, number | undefined] {
  const i = rail.lastIndexOf('/');
  const gpu = Number(rail.slice(i + 1));
  return [rail.slice(0, i), Number.isInteger(gpu) && gpu >= 0 ? gpu : undefined];
}
