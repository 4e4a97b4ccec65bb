/**
 * The hang detector's live signs in the sharded layout (docs/kafka.md, "Sharded layout"). GPU
 * samples and collectives stay in the shards, so each shard keeps what the hang detector keeps of
 * them (a JobProgress over its host groups' ranks) and sends the job stage, per host group and
 * second of event time, one small record (`t: 'signs'`):
 * - the group's event time, its GPUs' sample gap, and how far its collectives moved the job;
 * - the GPUs whose verdict (idle, busy, unsure) changed, with since when idle; every
 *   `FULL_EVERY` records all of them (a job stage started since learns them);
 * - the GPUs whose samples stopped, with their last sample's time;
 * - once the group's collectives went quiet for `QUIET_MS` (well before the shortest stall the
 *   detector judges), each of its ranks' last report and sequence numbers: a healthy job with
 *   steps shorter than that sends none.
 * The job stage (`SignsMirror`) writes them into its hang detector's JobProgress, so the detector
 * judges a sharded job's stall as replay does: same time, culprit and signs.
 */
import type { CollectiveEvent, GpuEvent } from '../../schema/events.js';
import { grown } from '../arrays.js';
import { SHARD_FORMAT } from '../slowlink/shard-reduce.js';
import { EMPTY_SLOT, IDLE, JobProgress, NO_SAMPLE, SLOTS } from './progress.js';

/** A group sends its signs at most once per this much of its event time. */
export const TICK_MS = 1_000;
/** Every this many records a group sends all its GPUs' verdicts, not only the changes. */
export const FULL_EVERY = 60;
/** A job with no event for this long is forgotten, here and by the shard stage (HANG_DEFAULTS.forgetAfterMs). */
export const FORGET_MS = 3_600_000;
/** A group's collectives quiet this long (below HANG_DEFAULTS.stallFloorMs): its ranks' progress goes out. */
export const QUIET_MS = 10_000;

/** A GPU's verdict: rank, host, GPU, verdict (progress.ts), since when idle, utilisation, power (null: not given). */
export type GpuSign = [number, string, number, number, number, number | null, number | null];
/** A GPU whose samples stopped: rank, its last sample's time. */
export type StaleSign = [number, number];
/** A rank's collectives: rank, host, GPU, last report's time, its step, and per communicator-operation (communicator, operation, sequence number, name in findings). */
export type RankSign = [number, string, number, number, number, [string, string, number, string][]];

export interface ShardSigns {
  t: 'signs';
  format: number;
  job: string;
  group: number;
  /** Everything of the group up to this event time is in. */
  ts: number;
  /** Smoothed gap between one GPU's samples (0: not known yet). */
  gap: number;
  /** The group's latest collective that moved the job on, and the highest step one named. */
  front?: [number, number];
  gpus?: GpuSign[];
  stale?: StaleSign[];
  ranks?: RankSign[];
}

interface GroupSigns {
  job: string;
  group: number;
  /** Latest event time seen, and that of the last record sent. */
  clock: number;
  sentTs: number;
  sent: number;
  /** Ranks with GPU samples, and ranks with collectives, in the order first seen. */
  gpuRanks: number[];
  collRanks: number[];
  /** GPUs whose verdict changed since the last record; ranks whose collectives did. */
  changed: Set<number>;
  dirty: Set<number>;
  maxTs: number;
  frontStep: number;
  sentFront: number;
}

interface JobSigns {
  progress: JobProgress;
  groups: Map<number, GroupSigns>;
  /** Per rank: the verdict last sent (NO_SAMPLE: none), whether it was sent as stale, and LISTED bits. */
  sentVerdict: Uint8Array;
  staleSent: Uint8Array;
  listed: Uint8Array;
}

/** A rank's bits in `listed`: in its group's GPUs, in its group's ranks with collectives. */
const GPU_LISTED = 1;
const COLL_LISTED = 2;

/** The shard half: GPU samples and collectives in, `signs` records out. */
export class SignsTracker {
  private readonly jobs = new Map<string, JobSigns>();
  /** Latest event time seen, and when jobs heard from no more are next looked for. */
  private latest = 0;
  private nextForget = 0;
  /** GPUs' owners from the collectives (samples that name no job or rank). */
  private readonly owners = new Map<string, [string, number]>();

  /** A GPU sample or collective of `group`; a record of the group's last second goes to `out` when its time moved past it. */
  add(e: GpuEvent | CollectiveEvent, group: number, out: unknown[]): void {
    let job = e.job;
    let rank = e.rank;
    if (e.kind === 'gpu' && (job === undefined || rank === undefined)) {
      const o = this.owners.get(`${e.host}/${e.gpu}`);
      job ??= o?.[0];
      rank ??= o?.[1];
    }
    if (job === undefined || rank === undefined) return;
    if (e.ts > this.latest) this.latest = e.ts;
    if (this.latest >= this.nextForget) this.forgetQuiet();
    const j = this.job(job);
    const g = this.group(j, job, group);
    if (e.ts > g.clock) {
      if (g.clock - g.sentTs >= TICK_MS) this.send(j, g, out);
      g.clock = e.ts;
    }
    const p = j.progress;
    if (e.kind === 'gpu') {
      p.gpuSample(rank, e);
      this.grow(j);
      if (!(j.listed[rank] & GPU_LISTED)) {
        j.listed[rank] |= GPU_LISTED;
        g.gpuRanks.push(rank);
      }
      if (p.gpuState[rank] !== j.sentVerdict[rank] || j.staleSent[rank]) g.changed.add(rank);
      return;
    }
    if (e.gpu !== undefined && !this.owners.has(`${e.host}/${e.gpu}`))
      this.owners.set(`${e.host}/${e.gpu}`, [job, rank]);
    const { seq, window } = e as { seq?: unknown; window?: unknown };
    p.collective(e, typeof seq === 'number' && Number.isFinite(seq) ? seq : undefined, window);
    this.grow(j);
    if (!(j.listed[rank] & COLL_LISTED)) {
      j.listed[rank] |= COLL_LISTED;
      g.collRanks.push(rank);
    }
    g.dirty.add(rank);
    if (window === 'open') return;
    if (e.ts > g.maxTs) g.maxTs = e.ts;
    if (window !== 'interval' && e.step > g.frontStep) g.frontStep = e.step;
  }

  /** End of input or an idle bus: every group's last stretch goes out. */
  flush(out: unknown[]): void {
    for (const j of this.jobs.values())
      for (const g of j.groups.values()) if (g.clock > g.sentTs) this.send(j, g, out);
  }

  /** Jobs with no event for FORGET_MS (they ended) are dropped: a shard runs for months. */
  private forgetQuiet(): void {
    this.nextForget = this.latest + 60_000;
    for (const [id, j] of this.jobs) {
      let last = 0;
      for (const g of j.groups.values()) if (g.clock > last) last = g.clock;
      if (this.latest - last > FORGET_MS) this.jobs.delete(id);
    }
  }

  /** Another process owns the job now, or (with `group`) that host group of it. */
  forget(job: string, group?: number): void {
    if (group === undefined) this.jobs.delete(job);
    else this.jobs.get(job)?.groups.delete(group);
  }

  private job(id: string): JobSigns {
    let j = this.jobs.get(id);
    if (!j) {
      j = {
        progress: new JobProgress(EMPTY_SLOT),
        groups: new Map(),
        sentVerdict: new Uint8Array(0),
        staleSent: new Uint8Array(0),
        listed: new Uint8Array(0),
      };
      this.jobs.set(id, j);
    }
    return j;
  }

  private group(j: JobSigns, job: string, group: number): GroupSigns {
    let g = j.groups.get(group);
    if (!g) {
      g = {
        job,
        group,
        clock: 0,
        sentTs: 0,
        sent: 0,
        gpuRanks: [],
        collRanks: [],
        changed: new Set(),
        dirty: new Set(),
        maxTs: 0,
        frontStep: -1,
        sentFront: 0,
      };
      j.groups.set(group, g);
    }
    return g;
  }

  private grow(j: JobSigns): void {
    const n = j.progress.size;
    if (j.sentVerdict.length >= n) return;
    j.sentVerdict = grown(j.sentVerdict, n);
    j.staleSent = grown(j.staleSent, n);
    j.listed = grown(j.listed, n);
  }

  private send(j: JobSigns, g: GroupSigns, out: unknown[]): void {
    const p = j.progress;
    const ts = g.clock;
    const r: ShardSigns = {
      t: 'signs',
      format: SHARD_FORMAT,
      job: g.job,
      group: g.group,
      ts,
      gap: Math.round(p.sampleGapMs),
    };
    if (g.maxTs > g.sentFront) {
      r.front = [g.maxTs, g.frontStep];
      g.sentFront = g.maxTs;
    }
    const full = g.sent % FULL_EVERY === 0;
    const gpus: GpuSign[] = [];
    const stale: StaleSign[] = [];
    // Stale well before the detector would call a GPU silent (3 gaps, at least 5 s): it then has the GPU's own last time.
    const staleBy = ts - Math.max(2 * p.sampleGapMs, 2_000);
    for (const rank of full ? g.gpuRanks : g.changed) {
      if (p.gpuTs[rank] < staleBy) continue;
      j.staleSent[rank] = 0;
      j.sentVerdict[rank] = p.gpuState[rank];
      gpus.push([
        rank,
        p.host[rank],
        p.gpu[rank],
        p.gpuState[rank],
        p.gpuState[rank] === IDLE ? p.idleSince[rank] : 0,
        num(p.util[rank]),
        num(p.power[rank]),
      ]);
    }
    g.changed.clear();
    for (const rank of g.gpuRanks)
      if (p.gpuTs[rank] < staleBy && !j.staleSent[rank]) {
        j.staleSent[rank] = 1;
        stale.push([rank, p.gpuTs[rank]]);
      }
    if (gpus.length) r.gpus = gpus;
    if (stale.length) r.stale = stale;
    if (g.maxTs > 0 && ts - g.maxTs >= QUIET_MS && (g.dirty.size > 0 || full)) {
      r.ranks = (full ? g.collRanks : [...g.dirty]).map((rank) => rankSign(p, rank));
      g.dirty.clear();
    }
    g.sentTs = ts;
    g.sent++;
    out.push(r);
  }
}

function rankSign(p: JobProgress, rank: number): RankSign {
  const seqs: [string, string, number, string][] = [];
  for (let k = rank * SLOTS; k < (rank + 1) * SLOTS && k < p.slotOp.length; k++) {
    const id = p.slotOp[k];
    if (id === EMPTY_SLOT) break;
    seqs.push([p.opKey[id], p.opName[id], p.slotSeq[k], p.opComm[id]]);
  }
  return [rank, p.host[rank], p.gpu[rank], p.lastTs[rank], p.lastStep[rank], seqs];
}

function num(x: number): number | null {
  return Number.isNaN(x) ? null : x;
}

/** What the job stage knows of one GPU from its group's records. */
interface GpuKnown {
  host: string;
  gpu: number;
  verdict: number;
  since: number;
  util: number;
  power: number;
  /** Its last sample's time once its samples stopped; 0 while they come. */
  staleTs: number;
}

/**
 * The job half: a sharded job's signs records, written into its hang detector's JobProgress. Its
 * GPUs are written whole (every GPU of the group sampled at the record's time, but those whose
 * samples stopped) only while the job looks stalled (no progress for `QUIET_MS`): until then, only
 * the changes, so a healthy job costs the job stage a few writes per record.
 */
export class SignsMirror {
  private readonly groups = new Map<number, number[]>();
  private readonly gpus = new Map<number, GpuKnown>();

  apply(r: ShardSigns, progressOf: (make: boolean) => JobProgress | undefined): void {
    const touched = this.learn(r);
    const p = progressOf(r.front !== undefined || r.ranks !== undefined);
    if (!p) return;
    p.touch(r.ts);
    if (r.gap > 0) p.sampleGapMs = r.gap;
    if (r.front) p.collectiveFront(r.front[0], r.front[1]);
    for (const [rank, host, gpu, lastTs, lastStep, seqs] of r.ranks ?? [])
      p.setRank(rank, host, gpu, lastTs, lastStep, seqs);
    const whole = r.ts - p.maxTs >= QUIET_MS;
    for (const rank of whole ? this.groups.get(r.group)! : touched)
      this.write(p, rank, this.gpus.get(rank)!, r.ts);
  }

  /** The record's GPUs, kept; returns the ranks it told of. */
  private learn(r: ShardSigns): number[] {
    let ranks = this.groups.get(r.group);
    if (!ranks) {
      ranks = [];
      this.groups.set(r.group, ranks);
    }
    const touched: number[] = [];
    for (const [rank, host, gpu, verdict, since, util, power] of r.gpus ?? []) {
      if (!this.gpus.has(rank)) ranks.push(rank);
      const k = {
        host,
        gpu,
        verdict,
        since,
        util: util ?? Number.NaN,
        power: power ?? Number.NaN,
        staleTs: 0,
      };
      this.gpus.set(rank, k);
      touched.push(rank);
    }
    for (const [rank, ts] of r.stale ?? []) {
      const k = this.gpus.get(rank);
      if (!k) continue;
      k.staleTs = ts;
      touched.push(rank);
    }
    return touched;
  }

  private write(p: JobProgress, rank: number, k: GpuKnown, ts: number): void {
    if (k.verdict === NO_SAMPLE) return;
    p.setGpu(rank, k.host, k.gpu, k.staleTs || ts, k.verdict, k.since, k.util, k.power);
  }
}
