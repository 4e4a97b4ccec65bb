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
import { type CusumConfig, fall, rise, score, smoothSpread } from '../cusum.js';
import { type FindingLog, findingId, severityForCost } from '../findings.js';
import { madSigmaInPlace, medianInPlace } from '../robust.js';
import type { RankTable } from '../steps.js';
import { busbwFactor } from './busbw.js';

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

interface Link {
  key: string;
  kind: string;
  op: string;
  nranks: number;
  bytes: number;
  /** Shortest duration a member reported: the one that arrived last waited for nobody. */
  durMin: number;
  /** Rails (host/gpu keys) the transfer goes through. */
  rails: Set<string>;
  /** For p2p edges: the two ends. */
  src?: string;
  dst?: string;
  /** For a collective whose members are all on one host: its `nvlink:` key. */
  intra?: string;
  /** For p2p edges: `src>dst`. */
  edge?: string;
}

interface Cusum {
  s: number;
  clear: number;
  flagged: boolean;
  onsetStep: number;
  onsetTs: number;
  n: number;
  sumMeasured: number;
  sumExpected: number;
  sumExcessMs: number;
  stepMsAtOnset: number;
  worst: { key: string; kind: string } | undefined;
  id?: string;
  pendingSince?: number;
  /** Bernoulli CUSUM over hits, the step of the last hit, and the longest gap between hits. */
  flap: number;
  lastHit: number;
  maxGap: number;
  /** Since onset: hit steps, and bandwidth measured and expected on them. */
  hits: number;
  hitMeasured: number;
  hitExpected: number;
}

const newCusum = (): Cusum => ({
  s: 0,
  clear: 0,
  flagged: false,
  onsetStep: 0,
  onsetTs: 0,
  n: 0,
  sumMeasured: 0,
  sumExpected: 0,
  sumExcessMs: 0,
  stepMsAtOnset: 0,
  worst: undefined,
  flap: 0,
  lastHit: Number.NEGATIVE_INFINITY,
  maxGap: 0,
  hits: 0,
  hitMeasured: 0,
  hitExpected: 0,
});

export class SlowLinkDetector {
  private readonly open = new Map<number, { colls: Map<string, Link>; edges: Map<number, Link> }>();
  /** host/gpu of each rank, built once (a string per event would dominate the cost). */
  private readonly railOfRank: string[] = [];
  private readonly hostOfRank: string[] = [];
  private readonly sigma = new Map<string, number>();
  private readonly rails = new Map<string, Cusum>();
  private readonly edges = new Map<string, Cusum & { src: string; dst: string }>();
  /** Intra-host communicators, keyed `nvlink:host/gpu+gpu+...`. */
  private readonly intra = new Map<string, Cusum>();
  /** GPUs an NVLink XID named, by host, for naming a slow intra-host group's GPU. */
  private readonly nvlinkHints = new Map<string, number>();
  private readonly stepTimes = new Map<number, { stepMs: number; ts: number }>();
  private lastTimes: { stepMs: number; ts: number } | undefined;
  private cumStepMs = 0;
  private scratch = new Float64Array(256);
  private readonly kinds: { family: string; nranks: number; band: number; kind: string }[] = [];
  /** What a p2p edge keeps from step to step (rails, key strings): built once, not per step and edge. */
  private readonly edgeParts = new Map<
    number,
    { src: string; dst: string; key: string; edge: string; rails: Set<string> }
  >();

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
      step = { colls: new Map(), edges: new Map() };
      this.open.set(e.step, step);
    }
    const rail = this.rail(e.rank, e.host, e.gpu);
    if (e.op === 'send' || e.op === 'recv') {
      if (e.peer === undefined) return;
      // Both ends report the same transfer: key the edge by sender and receiver rank.
      const [from, to] = e.op === 'send' ? [e.rank, e.peer] : [e.peer, e.rank];
      const key = from * 1_048_576 + to;
      let link = step.edges.get(key);
      if (!link) {
        const peerRail = this.rail(e.peer, e.peer_host, undefined);
        const [src, dst] = e.op === 'send' ? [rail, peerRail] : [peerRail, rail];
        let parts = this.edgeParts.get(key);
        if (parts?.src !== src || parts.dst !== dst) {
          parts = { src, dst, key: `p2p:${src}>${dst}`, edge: `${src}>${dst}`, rails: new Set([src, dst]) };
          this.edgeParts.set(key, parts);
        }
        link = this.newLink(parts.key, 'p2p', e, parts.rails, src, dst);
        link.edge = parts.edge;
        step.edges.set(key, link);
      }
      if (e.dur_ms < link.durMin) link.durMin = e.dur_ms;
      return;
    }
    const key = `${e.op}:${e.comm}`;
    let link = step.colls.get(key);
    if (!link) {
      link = this.newLink(key, e.op, e, new Set());
      step.colls.set(key, link);
    }
    if (e.dur_ms < link.durMin) link.durMin = e.dur_ms;
    link.rails.add(rail);
  }

  /** A link's kind string: a job has a handful, built once rather than per link and step. */
  private kindOf(family: string, nranks: number, band: number): string {
    for (const k of this.kinds)
      if (k.band === band && k.nranks === nranks && k.family === family) return k.kind;
    const kind = `${family}:${nranks}:${band}`;
    if (this.kinds.length < 64) this.kinds.push({ family, nranks, band, kind });
    return kind;
  }

  private newLink(
    key: string,
    family: string,
    e: CollectiveEvent,
    rails: Set<string>,
    src?: string,
    dst?: string,
  ): Link {
    const band = Math.round(Math.log2(Math.max(1, e.bytes)) / 2);
    return {
      key,
      kind: this.kindOf(family, e.nranks ?? 0, band),
      op: e.op,
      nranks: e.nranks ?? 2,
      bytes: e.bytes,
      durMin: Number.POSITIVE_INFINITY,
      rails,
      src,
      dst,
      intra: undefined, // set by judge(); present from the start so every link keeps one hidden class
      edge: undefined,
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
        this.judge([...links.colls.values(), ...links.edges.values()], t.stepMs, t.ts, s);
        this.lastTimes = t;
      }
      this.open.delete(s);
    }
  }

  private rail(rank: number, host: string | undefined, gpu: number | undefined): string {
    const cached = this.railOfRank[rank];
    // An elastic restart can move a rank to another host: its rail follows the report.
    if (cached !== undefined && (host === undefined || host === this.hostOfRank[rank])) return cached;
    const h = host ?? this.ranks.host[rank];
    const g = gpu ?? (rank < this.ranks.gpu.length ? this.ranks.gpu[rank] : -1);
    const rail = `${h}/${g}`;
    if (g >= 0 && h !== undefined) {
      this.railOfRank[rank] = rail; // cache only once fully known
      this.hostOfRank[rank] = h;
    }
    return rail;
  }

  private judge(links: Link[], stepMs: number, ts: number, step: number): void {
    this.cumStepMs += stepMs;
    // Per kind: the median log bus bandwidth and its robust spread.
    const byKind = new Map<string, Link[]>();
    for (const l of links) {
      if (!(l.durMin > 0 && l.durMin < Number.POSITIVE_INFINITY)) continue;
      // Inside a host (NVLink) and across hosts (NIC) are different kinds, whatever their sizes.
      l.intra = l.src ? undefined : intraHostKey(l.rails);
      const kind = l.intra ? `${l.kind}:nvlink` : l.kind;
      const list = byKind.get(kind);
      if (list) list.push(l);
      else byKind.set(kind, [l]);
    }
    // Per rail this step: its links, lowest score and worst link, in one map (one lookup per
    // membership rather than six: at 64k ranks these maps miss the cache on every access).
    const railAcc = new Map<
      string,
      {
        links: number;
        score: number;
        worst: { link: Link; z: number; measured: number; expected: number; excessMs: number };
      }
    >();
    const edgeScore = new Map<
      string,
      { link: Link; z: number; measured: number; expected: number; excessMs: number }
    >();
    const intraScore = new Map<
      string,
      { link: Link; z: number; measured: number; expected: number; excessMs: number }
    >();
    for (const [kind, list] of byKind) {
      if (list.length < this.cfg.minPeers) continue;
      if (this.scratch.length < list.length) this.scratch = new Float64Array(list.length * 2);
      const bw = list.map((l) =>
        Math.log(((l.bytes / (l.durMin / 1000)) * busbwFactor(l.op, l.nranks)) / 1e9),
      );
      bw.forEach((v, i) => {
        this.scratch[i] = v;
      });
      const med = medianInPlace(this.scratch, list.length);
      bw.forEach((v, i) => {
        this.scratch[i] = v;
      });
      const spread = madSigmaInPlace(this.scratch, list.length, med);
      const sigma = smoothSpread(this.sigma.get(kind), spread, this.cfg);
      this.sigma.set(kind, sigma);
      list.forEach((l, i) => {
        const z = score(med - bw[i], sigma, this.cfg);
        const measured = Math.exp(bw[i]);
        const expected = Math.exp(med);
        const durMs = l.durMin;
        const excessMs = Math.max(0, durMs - durMs * (measured / expected));
        const judged = { link: l, z, measured, expected, excessMs };
        if (l.intra) {
          intraScore.set(l.intra, judged);
          return; // no NIC traffic: it neither clears nor blames a rail
        }
        for (const r of l.rails) {
          const a = railAcc.get(r);
          if (!a) railAcc.set(r, { links: 1, score: z, worst: judged });
          else {
            a.links++;
            if (z < a.score) a.score = z;
            if (excessMs > a.worst.excessMs) a.worst = judged;
          }
        }
        if (l.src && l.dst) edgeScore.set(l.edge ?? `${l.src}>${l.dst}`, judged);
      });
    }
    // Cost: only the link that sets the pace costs anything, by its lead over the slowest link
    // that shares none of its rails (what the step would take without it), as for stragglers.
    const judged = [...edgeScore.values()];
    for (const a of railAcc.values()) judged.push(a.worst);
    for (const j of intraScore.values()) judged.push(j);
    const top = judged.reduce<(typeof judged)[number] | undefined>(
      (a, b) => (!a || b.excessMs > a.excessMs ? b : a),
      undefined,
    );
    let lead = 0;
    if (top) {
      // Each link once (a communicator is every member rail's worst), and the smaller rail set
      // walked: O(ranks) per step, where spreading each rail's link was O(ranks x group size).
      let otherMax = 0;
      const seen = new Set<Link>();
      for (const j of judged) {
        if (seen.has(j.link)) continue;
        seen.add(j.link);
        if (!(j.excessMs <= otherMax) && !sharesRail(j.link.rails, top.link.rails))
          otherMax = Math.max(otherMax, j.excessMs);
      }
      lead = top.excessMs - otherMax;
    }
    const paceCost = (link: Link) => (top && link === top.link ? lead : 0);
    for (const [rail, a] of railAcc) {
      // With one link, a rail's hit is its communicator's (a burst shared by every member): not a flap.
      this.stepCusum(
        this.railState(rail),
        a.score,
        a.links >= 2,
        a.worst,
        top?.link.rails.has(rail) ? lead : 0,
        step,
        stepMs,
        ts,
        rail,
      );
    }
    for (const [edge, j] of edgeScore) {
      // Not a spread: V8 gives each spread-built state a hidden class of its own (~500 bytes per edge).
      let st = this.edges.get(edge);
      if (!st) {
        st = Object.assign(newCusum(), { src: j.link.src!, dst: j.link.dst! });
        this.edges.set(edge, st);
      }
      this.stepCusum(st, j.z, false, j, paceCost(j.link), step, stepMs, ts, edge);
    }
    for (const [key, j] of intraScore) {
      const st = this.intra.get(key) ?? newCusum();
      this.intra.set(key, st);
      this.stepCusum(st, j.z, false, j, paceCost(j.link), step, stepMs, ts, key);
    }
    this.decidePairs(step, ts);
  }

  /** An NVLink XID (or error counter) named this GPU: a slow intra-host group through it is named by it. */
  nvlinkHint(host: string, gpu: number): void {
    this.nvlinkHints.set(host, gpu);
  }

  private railState(rail: string): Cusum {
    let st = this.rails.get(rail);
    if (!st) {
      st = newCusum();
      this.rails.set(rail, st);
    }
    return st;
  }

  private stepCusum(
    st: Cusum,
    x: number,
    /** Whether a hit may open this link on its own (rails with several links, not single edges). */
    flapOpens: boolean,
    worst: { link: Link; measured: number; expected: number; excessMs: number },
    costMs: number,
    step: number,
    stepMs: number,
    ts: number,
    key: string,
  ): void {
    const before = st.s;
    const flapBefore = st.flap;
    st.s = rise(st.s, x, this.cfg);
    if (x >= this.cfg.flapZ) {
      if (st.flagged && Number.isFinite(st.lastHit)) st.maxGap = Math.max(st.maxGap, step - st.lastHit);
      st.lastHit = step;
      st.flap += Math.log(this.cfg.flapP1 / this.cfg.flapP0);
    } else {
      st.flap = Math.max(0, st.flap + Math.log((1 - this.cfg.flapP1) / (1 - this.cfg.flapP0)));
    }
    if (!st.flagged) {
      if (st.s === 0 && st.flap === 0) return;
      if (before === 0 && flapBefore === 0) {
        st.onsetStep = step;
        st.onsetTs = ts - stepMs;
        st.n = 0;
        st.sumMeasured = 0;
        st.sumExpected = 0;
        st.sumExcessMs = 0;
        st.stepMsAtOnset = this.cumStepMs - stepMs;
        st.hits = 0;
        st.hitMeasured = 0;
        st.hitExpected = 0;
      }
    }
    st.n++;
    st.sumMeasured += worst.measured;
    st.sumExpected += worst.expected;
    st.sumExcessMs += costMs;
    if (x >= this.cfg.flapZ) {
      st.hits++;
      st.hitMeasured += worst.measured;
      st.hitExpected += worst.expected;
    }
    st.worst = { key: worst.link.key, kind: worst.link.kind };
    if (st.flagged) {
      st.clear = fall(st.clear, x, this.cfg);
      const quiet = step - st.lastHit >= Math.max(this.cfg.flapQuietSteps, 3 * st.maxGap);
      if (st.clear >= this.cfg.resolveH && quiet) this.resolve(st, ts);
      else if (st.id) this.log.update(st.id, ts, this.draft(st, key));
    } else if (st.s >= this.cfg.h || (flapOpens && st.flap >= this.cfg.flapH)) {
      st.flagged = true;
      st.clear = 0;
      st.maxGap = 0;
      if ('src' in st) st.pendingSince = step;
      else this.openRail(st, key, ts);
    }
  }

  private openRail(st: Cusum, rail: string, ts: number): void {
    const [host, gpu] = rail.startsWith('nvlink:') ? this.intraWhere(rail) : splitRail(rail);
    st.id = findingId('slow_link', this.job, host, gpu, undefined, st.onsetStep);
    this.log.openFinding(st.id, ts, this.draft(st, rail));
  }

  /** Slow edges whose rails were cleared are pair-specific links. */
  private decidePairs(step: number, ts: number): void {
    for (const [edge, st] of this.edges) {
      if (st.pendingSince === undefined || step - st.pendingSince < this.cfg.pairWaitSteps) continue;
      st.pendingSince = undefined;
      const src = this.rails.get(st.src);
      const dst = this.rails.get(st.dst);
      if (src?.flagged || dst?.flagged) continue; // the rail explains it
      // A rail with recent hits may yet open (a flapping NIC): wait for it rather than blame the pair.
      if ((src?.flap ?? 0) > 0 || (dst?.flap ?? 0) > 0) {
        st.pendingSince = step - this.cfg.pairWaitSteps + 1;
        continue;
      }
      const [host, gpu] = splitRail(st.src);
      st.id = findingId('slow_link', this.job, host, gpu, splitRail(st.dst)[0], st.onsetStep);
      this.log.openFinding(st.id, ts, this.draft(st, edge));
    }
  }

  private resolve(st: Cusum, ts: number): void {
    if (st.id) this.log.resolve(st.id, ts, { summary: 'link bandwidth back in line with its peers.' });
    st.id = undefined;
    st.flagged = false;
    st.s = 0;
    st.clear = 0;
    st.flap = 0;
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

  /** Open incidents (rails and pairs), for linking and summaries. */
  openIncidents(): { id: string; key: string }[] {
    const out: { id: string; key: string }[] = [];
    for (const [k, st] of this.rails) if (st.id) out.push({ id: st.id, key: k });
    for (const [k, st] of this.edges) if (st.id) out.push({ id: st.id, key: k });
    for (const [k, st] of this.intra) if (st.id) out.push({ id: st.id, key: k });
    return out;
  }
}

function sharesRail(a: Set<string>, b: Set<string>): boolean {
  const [small, large] = a.size <= b.size ? [a, b] : [b, a];
  for (const r of small) if (large.has(r)) return true;
  return false;
}

/** `nvlink:host/g+g+...` when every rail of a collective is on one host (two or more GPUs), else undefined. */
function intraHostKey(rails: Set<string>): string | undefined {
  if (rails.size < 2) return undefined;
  let host: string | undefined;
  const gpus: number[] = [];
  for (const r of rails) {
    const i = r.lastIndexOf('/');
    const h = r.slice(0, i);
    if (host === undefined) host = h;
    else if (h !== host) return undefined;
    gpus.push(Number(r.slice(i + 1)));
  }
  gpus.sort((a, b) => a - b);
  return `nvlink:${host}/${gpus.join('+')}`;
}

function splitRail(rail: string): [string, number | undefined] {
  const i = rail.lastIndexOf('/');
  const gpu = Number(rail.slice(i + 1));
  return [rail.slice(0, i), Number.isInteger(gpu) && gpu >= 0 ? gpu : undefined];
}
