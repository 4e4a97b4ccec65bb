/**
 * The slow-link detector's CUSUM states as columns: one row per NIC rail, p2p edge or NVLink
 * group, in typed arrays grown by doubling. At 65k ranks an object per state (and a string key
 * per edge) cost ~1.7 KB per rank. A row's hot columns (its CUSUMs, rails, chain) cost ~45 bytes;
 * what a finding reads (onset, sums since onset, worst link) lives in cold columns, in a slot
 * the row holds only while it is active: its CUSUMs off zero, flagged, or waiting as a pair. On a
 * healthy job most rows sit at zero and hold none.
 */
import { grown } from '../arrays.js';

export class CusumTable {
  size = 0;
  s = new Float64Array(0);
  /** Bernoulli CUSUM over hits, and the step of the last hit. */
  flap = new Float64Array(0);
  lastHit = new Float64Array(0);
  flagged = new Uint8Array(0);
  /** For edges: the rails at each end. */
  src = new Int32Array(0);
  dst = new Int32Array(0);
  /** For edges: the next row of the same sending rail (-1 at the end). */
  next = new Int32Array(0);
  /** The row's cold slot while active, -1 otherwise. */
  act = new Int32Array(0);
  /** Finding ids of the rows that have one: few. */
  readonly ids = new Map<number, string>();

  /** Cold columns, by slot (`act`); slots of rows gone quiet are reused. */
  slots = 0;
  private readonly free: number[] = [];
  clear = new Float64Array(0);
  onsetStep = new Float64Array(0);
  onsetTs = new Float64Array(0);
  n = new Float64Array(0);
  sumMeasured = new Float64Array(0);
  sumExpected = new Float64Array(0);
  sumExcessMs = new Float64Array(0);
  stepMsAtOnset = new Float64Array(0);
  /** Step an edge was flagged at, while it waits for its rails to be judged; NaN when not waiting. */
  pendingSince = new Float64Array(0);
  /** The longest gap between hits while flagged. */
  maxGap = new Float64Array(0);
  /** Since onset: hit steps, and bandwidth measured and expected on them. */
  hits = new Float64Array(0);
  hitMeasured = new Float64Array(0);
  hitExpected = new Float64Array(0);
  /** The worst link at the row's last step: its key (a p2p link's as its rail pair) and kind. */
  worstKey: (string | number | undefined)[] = [];
  worstKind: (string | undefined)[] = [];

  /** A fresh row: every statistic zero, no hit yet, no cold slot. */
  add(): number {
    if (this.size === this.s.length) this.grow(Math.max(64, this.size * 2));
    return this.size++;
  }

  /** The row's cold slot, taken (as a fresh row's: zeros, not pending) if it has none. */
  activate(row: number): number {
    if (this.act[row] >= 0) return this.act[row];
    let c = this.free.pop();
    if (c === undefined) {
      if (this.slots === this.clear.length) this.growCold(Math.max(64, this.slots * 2));
      c = this.slots++;
    } else {
      this.clear[c] = 0;
      this.onsetStep[c] = 0;
      this.onsetTs[c] = 0;
      this.n[c] = 0;
      this.sumMeasured[c] = 0;
      this.sumExpected[c] = 0;
      this.sumExcessMs[c] = 0;
      this.stepMsAtOnset[c] = 0;
      this.pendingSince[c] = Number.NaN;
      this.maxGap[c] = 0;
      this.hits[c] = 0;
      this.hitMeasured[c] = 0;
      this.hitExpected[c] = 0;
      this.worstKey[c] = undefined;
      this.worstKind[c] = undefined;
    }
    this.act[row] = c;
    return c;
  }

  /** Gives the row's slot back once nothing in it can be read again: CUSUMs at zero, not flagged, not pending. */
  release(row: number): void {
    const c = this.act[row];
    if (c < 0 || this.s[row] !== 0 || this.flap[row] !== 0 || this.flagged[row]) return;
    if (!Number.isNaN(this.pendingSince[c])) return;
    this.worstKey[c] = undefined;
    this.worstKind[c] = undefined;
    this.free.push(c);
    this.act[row] = -1;
  }

  private grow(c: number): void {
    this.s = grown(this.s, c);
    this.flap = grown(this.flap, c);
    this.lastHit = grown(this.lastHit, c, Number.NEGATIVE_INFINITY);
    this.flagged = grown(this.flagged, c);
    this.src = grown(this.src, c, -1);
    this.dst = grown(this.dst, c, -1);
    this.next = grown(this.next, c, -1);
    this.act = grown(this.act, c, -1);
  }

  private growCold(c: number): void {
    this.clear = grown(this.clear, c);
    this.onsetStep = grown(this.onsetStep, c);
    this.onsetTs = grown(this.onsetTs, c);
    this.n = grown(this.n, c);
    this.sumMeasured = grown(this.sumMeasured, c);
    this.sumExpected = grown(this.sumExpected, c);
    this.sumExcessMs = grown(this.sumExcessMs, c);
    this.stepMsAtOnset = grown(this.stepMsAtOnset, c);
    this.pendingSince = grown(this.pendingSince, c, Number.NaN);
    this.maxGap = grown(this.maxGap, c);
    this.hits = grown(this.hits, c);
    this.hitMeasured = grown(this.hitMeasured, c);
    this.hitExpected = grown(this.hitExpected, c);
  }
}

/**
 * NIC rails (`host/gpu`) as small integer ids, found from numbers: a host id and the GPU index,
 * never a string built per event. Names are rebuilt only for findings.
 */
export class RailIds {
  private readonly hostIds = new Map<string, number>();
  readonly hostNames: string[] = [];
  private readonly byKey = new Map<number, number>();
  /** Rails whose GPU is not a 16-bit integer (not valid v1, but never merged with one that is). */
  private readonly odd = new Map<string, number>();
  host = new Int32Array(64);
  gpu = new Float64Array(64);
  size = 0;

  id(host: string | undefined, gpu: number): number {
    const h = `${host}`; // as the rail's name spells it: an unknown host is "undefined"
    let hid = this.hostIds.get(h);
    if (hid === undefined) {
      hid = this.hostNames.length;
      this.hostIds.set(h, hid);
      this.hostNames.push(h);
    }
    const numeric = Number.isInteger(gpu) && gpu >= -32768 && gpu < 32768;
    const oddKey = numeric ? '' : `${h}/${gpu}`;
    let id = numeric ? this.byKey.get(hid * 65536 + gpu + 32768) : this.odd.get(oddKey);
    if (id !== undefined) return id;
    id = this.size++;
    if (id === this.host.length) {
      this.host = grown(this.host, id * 2);
      this.gpu = grown(this.gpu, id * 2);
    }
    this.host[id] = hid;
    this.gpu[id] = gpu;
    if (numeric) this.byKey.set(hid * 65536 + gpu + 32768, id);
    else this.odd.set(oddKey, id);
    return id;
  }

  hostName(id: number): string {
    return this.hostNames[this.host[id]];
  }

  /** Whether the rail's GPU is known (a rail named `host/-1` stands for any rank not yet placed). */
  known(id: number): boolean {
    return this.gpu[id] >= 0;
  }

  name(id: number): string {
    return `${this.hostNames[this.host[id]]}/${this.gpu[id]}`;
  }
}

/** A p2p edge's rails as one number (exact while rail ids stay below 2^26). */
export const railPair = (src: number, dst: number): number => src * 67_108_864 + dst;
export const pairSrc = (pair: number): number => Math.floor(pair / 67_108_864);
export const pairDst = (pair: number): number => pair % 67_108_864;
