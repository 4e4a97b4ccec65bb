/**
 * A simulated synchronous hybrid-parallel training job that emits v1 events.
 *
 * The model: every rank computes its share of the step (cost set by its pipeline stage, per-rank
 * hardware offset, per-step noise, rare spikes, job-wide jitter), then all ranks meet at the
 * collectives, so the wall step time is the same for all and equals the slowest rank's compute
 * plus the exposed communication plus any job-wide stall. The slow rank therefore shows high
 * `compute_ms` and low `comm_wait_ms`. Seeded and deterministic: the same options give the same
 * events, and adding a fault does not change the noise any other rank sees.
 */
import { RankwatchError } from '../core/errors.js';
import { Random } from '../core/random.js';
import { round } from '../core/round.js';
import { findGpu } from '../mfu/peaks.js';
import type { ModelConfig, RankwatchEvent } from '../schema/events.js';
import {
  checkFault,
  clockDropFor,
  clockSlowdown,
  driftSlowdown,
  type FaultSpec,
  flapSlow,
  formatFault,
  isActive,
  stallPlan,
} from './faults.js';
import { hangPhase, hangRandom, hangStopTs, isHang, restartAfterHang } from './hang.js';
import { MODELS } from './models.js';
import { defaultLayout, hostName, type Layout, place, type RankPlace, rankOf } from './topology.js';

export interface SimOptions {
  job?: string;
  ranks?: number;
  steps?: number;
  /** Typical wall time of a step. */
  stepMs?: number;
  seed?: number;
  startTs?: number;
  gpuModel?: string;
  dtype?: string;
  model?: string;
  layout?: Partial<Layout>;
  /** Per-rank, per-step compute noise (log-normal sigma). */
  noise?: number;
  /** Job-wide compute jitter per step (moves everyone alike). */
  jobJitter?: number;
  /**
   * Probability per rank-step of a single-step 1.5-3x spike (a page fault, an unaligned GC).
   * Default: `spikesPerStep` spread over the job's ranks (see there).
   */
  spikeProb?: number;
  /**
   * Single-rank spikes per step across the whole job, when `spikeProb` is not given: at most
   * 0.077, a 256-rank job at 0.03% per rank-step (smaller jobs keep 0.03%). Independent per-rank spikes at a fixed per-rank rate
   * would hit some rank of a 16k-rank job in nearly every step, and since every step waits for
   * its slowest rank, steps would take ~2.5 s instead of 1.2 s. Jobs that large do not run like
   * that: their operators align the heavy per-process pauses (Megatron-LM's `--manual-gc`,
   * megatron/training/arguments.py: "helps to align the timing of the collection across ranks
   * which mitigates the impact of CPU-associated jitters"; those are the job-wide `pauseProb` and
   * `jobJitter` here) and keep per-rank jitter rare, so the job-level rate is what stays fixed.
   */
  spikesPerStep?: number;
  /** Probability per step of a job-wide data-loader stall. */
  stallProb?: number;
  /** Extra cost of the first and last pipeline stages (embeddings, logits). */
  firstStageCost?: number;
  lastStageCost?: number;
  /** Per-communicator, per-step duration noise (log-normal sigma). */
  commNoise?: number;
  /** Probability per communicator-step of a one-step congestion burst. */
  commBurstProb?: number;
  telemetry?: boolean;
  /** GPU telemetry interval (default 1 s; dcgm-exporter's own default, DCGM_EXPORTER_INTERVAL, is 30 s). */
  telemetryEveryMs?: number;
  collectives?: boolean;
  checkpointEvery?: number;
  /**
   * As in real traces: a rank's collective duration includes waiting for the slowest member to
   * arrive (a late rank makes its communicators look slow to everyone but itself).
   */
  lateArrival?: boolean;
  /** Probability per step of a job-wide pause (GC, a slow filesystem read), heavy-tailed: Pareto from 150 ms, capped at 20 s. */
  pauseProb?: number;
  /** Rank 0 writes the checkpoint inside its step (the others wait for it in their collectives). */
  rank0Checkpoint?: boolean;
  /** Each host's clock is off by up to this much (uniform, fixed per host), on every event it stamps. */
  clockSkewMs?: number;
  /** The job restarts before this step: a gap, a checkpoint load, a few slow warm-up steps. */
  restartAt?: number;
  /**
   * Tensor-parallel all-reduces inside each host (NVLink), one record per rank per step, as a
   * Megatron job has them (default on; off for a lighter stream).
   */
  intraHost?: boolean;
  /** At the restart, hosts are renumbered (elastic): every rank lands on another host. Faults stay with their rank. */
  renumber?: boolean;
  faults?: FaultSpec[];
  /**
   * GPUs persistently slower (or faster) than their peers by `pct` percent, beside the drawn
   * per-GPU spread: silicon and power management, not a fault (same-SKU GPUs differ by several
   * percent in the field: Sinha et al., "Not All GPUs Are Created Equal", SC22). They stay with the
   * GPU (host index, GPU index) across an elastic restart.
   */
  gpuOffsets?: { host: number; gpu: number; pct: number }[];
  /**
   * A fleet property: each GPU's own fixed speed offset, drawn once per GPU (host index, GPU
   * index) from a seeded N(0, gpuOffsetSigma), e.g. 0.025 for silicon and cooling variation of
   * 2.5%. It multiplies the compute time and stays with the GPU across an elastic restart.
   */
  gpuOffsetSigma?: number;
  /**
   * Every rank stalls together, `stall` seconds (a range) every `every` ± `jitter` steps from step
   * `at`, each rank within ~5% of the others' length: a data loader reading its next shard on
   * every rank at once, a job-wide GC. The time counts in every rank's `compute_ms`. Not a fault:
   * peer-relative detectors must stay silent.
   */
  sharedStalls?: { every: number; jitter?: number; stall: [number, number]; at?: number };
}

/** What was injected, where, and what it really cost: the ground truth the evaluation scores against. */
export interface InjectedFault {
  spec: FaultSpec;
  host: string;
  gpu?: number;
  rank?: number;
  /** For a pair-specific link fault: the other end. */
  peerHost?: string;
  ranks: number[];
  onsetStep: number;
  onsetTs?: number;
  /** When the fault began, where that is earlier than the onset scored (a drift: its ramp starts at 0%). */
  startTs?: number;
  /** Share of throughput lost to this fault alone over its active steps, percent. */
  trueCostPct: number;
}

export const SIM_DEFAULTS = {
  ranks: 256,
  steps: 240,
  stepMs: 1200,
  seed: 1,
  startTs: Date.UTC(2026, 0, 1),
  gpuModel: 'H100-SXM',
  dtype: 'bf16',
  model: 'llama-70b',
  noise: 0.015,
  jobJitter: 0.02,
  spikesPerStep: 0.0768,
  stallProb: 0.02,
  firstStageCost: 1.06,
  lastStageCost: 1.12,
  commNoise: 0.04,
  commBurstProb: 0.002,
  telemetry: true,
  collectives: true,
  checkpointEvery: 100,
};

const EXPOSED_COMM_SHARE = 0.06;
/** A rank's chance of a single-step spike, up to the job's `spikesPerStep`. */
const SPIKE_PROB_PER_RANK = 0.0003;
/** A drift counts as a fault once its slowdown passes this (3%). */
export const DRIFT_VISIBLE = 0.03;
const RAIL_BUSBW_BYTES_PER_MS = 40e6; // 40 GB/s bus bandwidth per NIC rail
const P2P_BYTES_PER_MS = 20e6;
const NVLINK_BUSBW_BYTES_PER_MS = 150e6; // 150 GB/s bus bandwidth inside a host

export class ClusterSim {
  readonly opts: typeof SIM_DEFAULTS & SimOptions & { job: string };
  readonly layout: Layout;
  readonly places: RankPlace[];
  readonly faults: InjectedFault[];
  private readonly model: ModelConfig;
  private readonly maxClock: number;
  /** Each stall fault's steps and lengths (ms), drawn from the seed at construction. */
  private readonly stalls = new Map<InjectedFault, Map<number, number>>();
  /** The job-wide stalls' steps and lengths (ms), when `sharedStalls` is set. */
  private readonly sharedPlan: Map<number, number> | undefined;

  constructor(options: SimOptions = {}) {
    const o = { ...SIM_DEFAULTS, ...stripUndefined(options) };
    this.opts = { ...o, job: options.job ?? `sim-${o.seed}` };
    const base = defaultLayout(o.ranks, o.layout?.gpusPerHost ?? 8);
    this.layout = { ...base, ...stripUndefined(o.layout ?? {}) };
    const { tp, dp, pp } = this.layout;
    if (tp * dp * pp !== o.ranks) throw new Error(`layout tp*dp*pp = ${tp * dp * pp} != ranks ${o.ranks}`);
    this.places = Array.from({ length: o.ranks }, (_, r) => place(r, this.layout));
    const model = MODELS[o.model];
    if (!model) throw new Error(`unknown model "${o.model}" (expected ${Object.keys(MODELS).join(', ')})`);
    this.model = model;
    this.maxClock = findGpu(o.gpuModel)?.maxSmClockMhz ?? 1980;
    const job = {
      ranks: o.ranks,
      steps: o.steps,
      hosts: Math.ceil(o.ranks / this.layout.gpusPerHost),
      gpusPerHost: this.layout.gpusPerHost,
    };
    for (const f of o.faults ?? []) checkFault(f, job);
    this.faults = (o.faults ?? []).map((f) => this.resolveFault(f));
    // Their own generators: a stall plan shifts no other draw.
    this.faults.forEach((f, i) => {
      if (f.spec.type !== 'stall') return;
      const rng = new Random((o.seed ^ 0x2545f491 ^ Math.imul(i + 1, 0x9e3779b1)) >>> 0);
      this.stalls.set(f, stallPlan(f.spec, o.steps - 1, rng));
    });
    const shared = o.sharedStalls;
    this.sharedPlan = shared
      ? stallPlan(
          {
            type: 'stall',
            at: shared.at ?? 0,
            every: shared.every,
            jitter: shared.jitter,
            stall: shared.stall,
          },
          o.steps - 1,
          new Random((o.seed ^ 0x68e31da4) >>> 0),
        )
      : undefined;
  }

  private resolveFault(spec: FaultSpec): InjectedFault {
    const hostIndex = spec.host ?? (spec.rank !== undefined ? this.places[spec.rank]?.hostIndex : undefined);
    if (hostIndex === undefined) throw new Error(`fault ${spec.type} needs rank= or host=`);
    const onHost = this.places.filter((p) => p.hostIndex === hostIndex);
    if (onHost.length === 0) throw new Error(`fault ${spec.type}: host ${hostIndex} is not in the job`);
    if (spec.type === 'power_brake') {
      return {
        spec,
        host: hostName(hostIndex),
        ranks: onHost.map((p) => p.rank),
        onsetStep: spec.at,
        trueCostPct: 0,
      };
    }
    const rank = spec.rank ?? onHost.find((p) => p.gpu === (spec.gpu ?? 0))?.rank;
    if (rank === undefined || !this.places[rank]) throw new Error(`fault ${spec.type}: rank not in the job`);
    const p = this.places[rank];
    if (spec.type === 'hang_allreduce' && this.layout.dp < 2)
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        `--fault ${formatFault(spec)}: needs data parallelism (dp ≥ 2; this job has ${this.layout.tp * this.layout.pp} rank(s) per replica and one replica): give the job more ranks, or use hang`,
      );
    const peerHost = spec.type === 'link' ? this.places[spec.peer ?? -1]?.host : undefined;
    if (spec.type === 'link' && peerHost === undefined)
      throw new Error('fault link needs peer= (a rank in the job)');
    return {
      spec,
      host: p.host,
      gpu: p.gpu,
      rank,
      peerHost,
      ranks: [rank],
      onsetStep: spec.at,
      trueCostPct: 0,
    };
  }

  private stageCost(stage: number): number {
    const { pp } = this.layout;
    let c = 1;
    if (stage === 0) c *= this.opts.firstStageCost;
    if (stage === pp - 1) c *= this.opts.lastStageCost;
    return c;
  }

  jobEvent(ts: number): RankwatchEvent {
    const { tp, dp, pp } = this.layout;
    return {
      v: 1,
      kind: 'job',
      ts,
      job: this.opts.job,
      world_size: this.opts.ranks,
      gpu_model: this.opts.gpuModel,
      dtype: this.opts.dtype,
      parallel: { tp, pp, dp },
      model: this.model,
      global_batch_tokens: this.globalBatchTokens(),
      hosts: [...new Set(this.places.map((p) => p.host))],
    };
  }

  /** Sized so a healthy job runs near 40% MFU at the chosen step time. */
  private globalBatchTokens(): number {
    const seqs = Math.max(1, Math.round((this.opts.ranks * this.opts.stepMs) / 1200 / 8));
    return seqs * this.model.seq_len;
  }

  /** The job's events, each stamped by its host's clock (off by up to clockSkewMs). */
  *events(): Generator<RankwatchEvent> {
    const skewMs = this.opts.clockSkewMs ?? 0;
    if (!skewMs) {
      yield* this.run();
      return;
    }
    const rng = new Random(this.opts.seed ^ 0x7f4a7c15);
    const skew = new Map<string, number>();
    for (const p of this.places)
      if (!skew.has(p.host)) skew.set(p.host, Math.round(skewMs * (2 * rng.next() - 1)));
    for (const e of this.run()) {
      const host = 'host' in e ? e.host : undefined;
      const off = host === undefined ? undefined : skew.get(host);
      yield off ? { ...e, ts: e.ts + off } : e;
    }
  }

  /** Elastic restart: every host's ranks move `shift` hosts on (GPU index kept). */
  private renumberHosts(shift: number, hostCount: number): void {
    for (let r = 0; r < this.places.length; r++) {
      const p = place(r, this.layout);
      const hostIndex = (p.hostIndex + shift) % hostCount;
      this.places[r] = { ...p, hostIndex, host: hostName(hostIndex) };
    }
  }

  private *run(): Generator<RankwatchEvent> {
    const o = this.opts;
    if (o.renumber) this.renumberHosts(0, Number.POSITIVE_INFINITY); // a second run starts as the first did
    const { tp, dp, pp } = this.layout;
    const n = o.ranks;
    const noiseRng = new Random(o.seed);
    const jobRng = new Random(o.seed ^ 0x5bd1e995);
    const telRng = new Random(o.seed ^ 0x27d4eb2f);
    const commRng = new Random(o.seed ^ 0x165667b1);
    // Options added later draw from their own generator, so the noise above stays as it was.
    const extraRng = new Random(o.seed ^ 0x3c6ef372);
    const hostCount = Math.ceil(n / this.layout.gpusPerHost);
    const spikeProb = o.spikeProb ?? Math.min(SPIKE_PROB_PER_RANK, o.spikesPerStep / n);
    const offsets = this.drawSpeeds(noiseRng);
    const silicon = this.siliconSpeeds();
    const gph = this.layout.gpusPerHost;
    // Compute so that the costliest stage plus exposed comm fills the step.
    const unit =
      (o.stepMs * (1 - EXPOSED_COMM_SHARE)) /
      Math.max(...Array.from({ length: pp }, (_, s) => this.stageCost(s))) /
      1.03;
    const stageBase = Array.from({ length: pp }, (_, s) => unit * this.stageCost(s));
    const params = this.model.params ?? 1e10;
    const gradBytes = (params / pp / tp) * 2;
    const arNominal = (gradBytes * (2 * (dp - 1))) / dp / RAIL_BUSBW_BYTES_PER_MS;
    const actBytes = ((this.globalBatchTokens() / dp) * this.model.hidden * 2) / tp;
    const p2pNominal = actBytes / P2P_BYTES_PER_MS;
    const exposedBase = o.stepMs * EXPOSED_COMM_SHARE;
    // Tensor-parallel groups (one per stage and replica) all-reduce activations over NVLink.
    const intra = o.intraHost !== false && tp > 1;
    const tpRng = new Random(o.seed ^ 0x1b873593);
    const tpBytes = actBytes * tp * 8;
    const tpNominal = (tpBytes * (2 * (tp - 1))) / tp / NVLINK_BUSBW_BYTES_PER_MS;
    const tpDurs = new Float64Array(pp * dp);
    const tpArrive = new Float64Array(pp * dp);

    const arDurs = new Float64Array(pp * tp);
    const arArrive = new Float64Array(pp * tp);
    // Waiting for the slowest member to arrive, when collectives are timed as in real traces.
    const late = (r: number, arrive: number) => (o.lateArrival ? Math.max(0, arrive - compute[r]) : 0);
    const p2pDurs = new Float64Array(n);
    const compute = new Float64Array(n);
    const clean = new Float64Array(n);
    /** Each rank's share of this step's job-wide stall (sharedStalls), ms. */
    const shared = new Float64Array(n);
    const sharedRng = new Random((o.seed ^ 0x4cf5ad43) >>> 0);
    const costSums = this.faults.map(() => ({ actual: 0, without: 0 }));
    // One hang per run, at its step (a restart after it does not hang again).
    const hang = this.faults.find((f) => isHang(f.spec.type));
    let hangDone = false;
    const hangRng = hangRandom(o.seed);
    let ts = o.startTs;
    yield this.jobEvent(ts);
    yield { v: 1, kind: 'job_event', ts, job: o.job, event: 'start' };

    for (let step = 0; step < o.steps; step++) {
      if (step === o.restartAt) {
        ts += 60_000 + Math.round(30_000 * extraRng.next());
        yield { v: 1, kind: 'job_event', ts, job: o.job, event: 'restart', cause: 'node replaced' };
        if (o.renumber) {
          this.renumberHosts(1 + extraRng.int(hostCount - 1 || 1), hostCount);
          // A fault that begins after the restart is where its rank now runs.
          for (const f of this.faults) {
            if (f.rank === undefined || f.spec.at < step) continue;
            f.host = this.places[f.rank].host;
            if (f.spec.type === 'link') f.peerHost = this.places[f.spec.peer ?? -1]?.host;
          }
        }
        ts += 20_000;
        yield {
          v: 1,
          kind: 'checkpoint',
          ts,
          job: o.job,
          rank: 0,
          step,
          phase: 'load',
          dur_ms: 20_000,
          ok: true,
        };
      }
      // A hang at the top of this step: nothing of it runs until the culprit resumes, if it does.
      let heldMs = 0;
      if (hang && !hangDone && step === hang.spec.at && hang.spec.type === 'hang') {
        hangDone = true;
        const h = yield* this.hangEvents(hang, step, ts, ts, compute, hangRng);
        if (h.resumeTs === undefined) {
          ts = h.restartedAt;
          continue;
        }
        heldMs = h.resumeTs - ts;
        ts = h.resumeTs;
      }
      // A hang before the data-parallel all-reduce: that group's reports of this step wait for it.
      const holdGroup =
        hang && !hangDone && step === hang.spec.at && hang.spec.type === 'hang_allreduce'
          ? this.dpGroupOf(hang.rank!)
          : undefined;
      const held: RankwatchEvent[] = [];
      const t0 = ts;
      const warmup = o.restartAt !== undefined && step >= o.restartAt && step < o.restartAt + 3 ? 1.5 : 1;
      const jobFactor = Math.exp(o.jobJitter * jobRng.normal()) * warmup;
      const pause =
        o.pauseProb && extraRng.chance(o.pauseProb)
          ? Math.min(20_000, 150 * (1 - extraRng.next()) ** (-1 / 1.5))
          : 0;
      const stall = (jobRng.chance(o.stallProb) ? 800 + jobRng.next() * 4000 : 0) + pause;
      const sharedMs = this.sharedPlan?.get(step) ?? 0;
      for (let r = 0; r < n; r++) shared[r] = sharedMs && sharedMs * (1 + 0.05 * sharedRng.normal());
      for (let r = 0; r < n; r++) {
        const spike = noiseRng.chance(spikeProb) ? 1.5 + noiseRng.next() * 1.5 : 1;
        const z = noiseRng.normal();
        const p = this.places[r];
        const offset = offsets[(p.hostIndex * gph + p.gpu) % n];
        clean[r] = stageBase[p.stage] * offset * Math.exp(o.noise * z) * jobFactor * spike;
        compute[r] = clean[r] * this.computeFactor(r, step) + shared[r] + this.stallMs(r, step);
      }
      // Communicator durations: DP all-reduce per (stage, tp) group, p2p per edge (indexed by
      // sender). Network weather moves all alike; each communicator adds its own noise and, rarely,
      // a one-step congestion burst. The same durations without faults give the true NIC cost.
      const weather = Math.exp(0.03 * commRng.normal());
      const jitter = () =>
        Math.exp(o.commNoise * commRng.normal()) *
        (commRng.chance(o.commBurstProb) ? 1.5 + commRng.next() : 1);
      let commExtra = 0;
      let commExtraClean = 0;
      for (let s = 0; s < pp && dp > 1; s++) {
        for (let t = 0; t < tp; t++) {
          let f = 1;
          let arrive = 0;
          for (let d = 0; d < dp; d++) {
            const r = rankOf(t, d, s, this.layout);
            f = Math.max(f, this.linkFactor(r, -1, step));
            arrive = Math.max(arrive, compute[r]);
          }
          arArrive[s * tp + t] = arrive;
          const clean = arNominal * weather * jitter();
          arDurs[s * tp + t] = clean * f;
          commExtra = Math.max(commExtra, clean * f - arNominal * weather);
          commExtraClean = Math.max(commExtraClean, clean - arNominal * weather);
        }
      }
      for (let r = 0; r < n && pp > 1; r++) {
        const p = this.places[r];
        if (p.stage >= pp - 1) continue;
        const peer = rankOf(p.tp, p.dp, p.stage + 1, this.layout);
        const clean = p2pNominal * weather * jitter();
        const f = Math.max(this.linkFactor(r, peer, step), this.linkFactor(peer, r, step));
        p2pDurs[r] = clean * f;
        commExtra = Math.max(commExtra, clean * f - p2pNominal * weather);
        commExtraClean = Math.max(commExtraClean, clean - p2pNominal * weather);
      }
      // NVLink: only a fault's excess reaches the step (the healthy cost is inside the compute share).
      let tpExtra = 0;
      for (let g = 0; intra && g < pp * dp; g++) {
        const s = Math.floor(g / dp);
        const d = g % dp;
        let f = 1;
        let arrive = 0;
        for (let t = 0; t < tp; t++) {
          const r = rankOf(t, d, s, this.layout);
          f = Math.max(f, this.nvlinkFactor(r, step));
          arrive = Math.max(arrive, compute[r]);
        }
        const clean =
          tpNominal *
          Math.exp(o.commNoise * tpRng.normal()) *
          (tpRng.chance(o.commBurstProb) ? 1.5 + tpRng.next() : 1);
        tpDurs[g] = clean * f;
        tpArrive[g] = arrive;
        tpExtra = Math.max(tpExtra, clean * (f - 1));
      }
      commExtra += tpExtra;
      const checkpoint = o.checkpointEvery > 0 && step > 0 && step % o.checkpointEvery === 0;
      const writeMs = checkpoint ? 8000 + jobRng.next() * 4000 : 0;
      // Rank 0 writing inside its step: its compute holds the write, everyone else waits for it.
      if (o.rank0Checkpoint) compute[0] += writeMs;
      const ckptMs = o.rank0Checkpoint ? 0 : writeMs;
      const maxCompute = maxOf(compute);
      const stepMs = stall + ckptMs + maxCompute + exposedBase + commExtra;
      const t1 = Math.round(t0 + stepMs);
      this.accumulateCost(step, compute, clean, shared, stepMs, commExtra - commExtraClean, costSums);

      if (o.telemetry) yield* this.telemetry(t0, t1, step, stall + ckptMs, telRng, silicon);
      for (const f of this.faults) {
        if (step === f.spec.at && !isHang(f.spec.type)) f.startTs = t0;
        // A drift is a fault once it passes DRIFT_VISIBLE: its time to detect counts from there.
        if (f.spec.type === 'drift') {
          if (f.onsetTs === undefined && driftSlowdown(f.spec, step) >= DRIFT_VISIBLE) f.onsetTs = t0;
        } else if (step === f.spec.at && !isHang(f.spec.type)) f.onsetTs = t0;
        // A degraded NVLink may also log an XID (74) a couple of steps in, when its spec gives a code.
        const nvlinkXid = f.spec.type === 'nvlink' && f.spec.code !== undefined && step === f.spec.at + 2;
        if ((f.spec.type === 'xid' && step === f.spec.at) || nvlinkXid) {
          yield {
            v: 1,
            kind: 'fault',
            ts: t0 + 1,
            host: f.host,
            gpu: f.gpu,
            job: o.job,
            rank: f.rank,
            source: 'xid',
            code: f.spec.code ?? 79,
            message: xidMessage(f.spec.code ?? 79),
          };
        }
      }
      if (o.collectives) {
        const tc = t1 - 5;
        for (let r = 0; r < n; r++) {
          const p = this.places[r];
          if (dp > 1) {
            yield* pass(held, holdGroup, {
              v: 1,
              kind: 'collective',
              ts: tc,
              job: o.job,
              rank: r,
              host: p.host,
              gpu: p.gpu,
              step,
              op: 'allreduce',
              comm: `dp.s${p.stage}.t${p.tp}`,
              nranks: dp,
              bytes: Math.round(gradBytes),
              dur_ms: ms3(
                arDurs[p.stage * tp + p.tp] * (1 + 0.002 * commRng.normal()) +
                  late(r, arArrive[p.stage * tp + p.tp]),
              ),
              // The communicator's sequence number (one operation a step here), as NCCL Inspector counts.
              seq: step + 1,
            });
          }
          if (intra) {
            const g = p.stage * dp + p.dp;
            yield* pass(held, holdGroup, {
              v: 1,
              kind: 'collective',
              ts: tc,
              job: o.job,
              rank: r,
              host: p.host,
              gpu: p.gpu,
              step,
              op: 'allreduce',
              comm: `tp.s${p.stage}.d${p.dp}`,
              nranks: tp,
              bytes: Math.round(tpBytes),
              dur_ms: ms3(tpDurs[g] * (1 + 0.002 * tpRng.normal()) + late(r, tpArrive[g])),
              seq: step + 1,
            });
          }
          if (p.stage < pp - 1) {
            const peer = rankOf(p.tp, p.dp, p.stage + 1, this.layout);
            yield* pass(held, holdGroup, {
              v: 1,
              kind: 'collective',
              ts: tc,
              job: o.job,
              rank: r,
              host: p.host,
              gpu: p.gpu,
              step,
              op: 'send',
              comm: `pp.d${p.dp}.t${p.tp}`,
              nranks: 2,
              peer,
              peer_host: this.places[peer].host,
              bytes: Math.round(actBytes),
              dur_ms: ms3(p2pDurs[r] + late(r, Math.max(compute[r], compute[peer]))),
              seq: step + 1,
            });
          }
          if (p.stage > 0) {
            const peer = rankOf(p.tp, p.dp, p.stage - 1, this.layout);
            yield* pass(held, holdGroup, {
              v: 1,
              kind: 'collective',
              ts: tc,
              job: o.job,
              rank: r,
              host: p.host,
              gpu: p.gpu,
              step,
              op: 'recv',
              comm: `pp.d${p.dp}.t${p.tp}`,
              nranks: 2,
              peer,
              peer_host: this.places[peer].host,
              bytes: Math.round(actBytes),
              dur_ms: ms3(p2pDurs[peer] + late(r, Math.max(compute[r], compute[peer]))),
              seq: step + 1,
            });
          }
        }
      }
      const tokens = this.globalBatchTokens() / dp;
      for (let r = 0; r < n; r++) {
        const p = this.places[r];
        // A hang the culprit came back from: it held the step, the others waited for it.
        const culpritHeld = r === hang?.rank ? heldMs : 0;
        yield* pass(held, holdGroup, {
          v: 1,
          kind: 'step',
          ts: t1,
          job: o.job,
          rank: r,
          host: p.host,
          gpu: p.gpu,
          stage: p.stage,
          step,
          step_ms: ms3(stepMs + heldMs),
          compute_ms: ms3(compute[r] + culpritHeld),
          comm_wait_ms: ms3(stepMs - compute[r] - stall - ckptMs + heldMs - culpritHeld),
          tokens, // the replica's tokens, on every rank of it (design.md)
        });
      }
      if (checkpoint) {
        yield {
          v: 1,
          kind: 'checkpoint',
          ts: t1,
          job: o.job,
          rank: 0,
          step,
          phase: 'save',
          dur_ms: Math.round(writeMs),
          bytes: Math.round(params * 14),
          ok: true,
        };
      }
      ts = t1;
      if (holdGroup && hang) {
        hangDone = true;
        const h = yield* this.hangEvents(hang, step, t0, t1, compute, hangRng);
        if (h.resumeTs === undefined) {
          ts = h.restartedAt;
          continue;
        }
        // The culprit came back: its group finishes the step as late as it was held.
        const late = h.resumeTs - h.stopTs;
        for (const e of held) yield resumed(e, late, hang.rank!);
        ts = t1 + late;
      }
    }
    yield { v: 1, kind: 'job_event', ts, job: o.job, event: 'finished' };
    this.faults.forEach((f, i) => {
      const c = costSums[i];
      // A hang costs the job all of its throughput while it lasts.
      f.trueCostPct = isHang(f.spec.type)
        ? 100
        : c.actual > 0
          ? (100 * (c.actual - c.without)) / c.actual
          : 0;
    });
  }

  /**
   * Each physical GPU's compute-time multiplier (silicon, power management), by host slot
   * (host index x GPUs per host + GPU index): it stays with the GPU when an elastic restart moves
   * ranks to other hosts. Above 1 is slower. What the slowest-GPUs ranking should find.
   */
  gpuSpeeds(): Float64Array {
    return this.drawSpeeds(new Random(this.opts.seed));
  }

  /** Draws the GPUs' multipliers: the first draws of the job's noise generator, then the fleet's own. */
  private drawSpeeds(noiseRng: Random): Float64Array {
    const o = this.opts;
    const n = o.ranks;
    const offsets = Float64Array.from({ length: n }, () => 1 + 0.004 * noiseRng.normal());
    const silicon = this.siliconSpeeds();
    if (silicon) for (let i = 0; i < n; i++) offsets[i] *= silicon[i];
    return offsets;
  }

  /**
   * The chosen part of each GPU's multiplier (gpuOffsets, gpuOffsetSigma), by host slot; undefined
   * without either. It shows in the GPU's telemetry (a slower bin runs at its power cap).
   */
  private siliconSpeeds(): Float64Array | undefined {
    const o = this.opts;
    if (!o.gpuOffsetSigma && !o.gpuOffsets?.length) return undefined;
    const n = o.ranks;
    const speeds = new Float64Array(n).fill(1);
    const gph = this.layout.gpusPerHost;
    for (const g of o.gpuOffsets ?? []) speeds[(g.host * gph + g.gpu) % n] *= 1 + g.pct / 100;
    // Its own generator: the fleet's draw leaves every other draw of the job as it was.
    const rng = new Random(o.seed ^ 0x2545f491);
    if (o.gpuOffsetSigma)
      for (let i = 0; i < n; i++) speeds[i] *= Math.max(0.5, 1 + o.gpuOffsetSigma * rng.normal());
    return speeds;
  }

  /**
   * A hang's events (sim/hang.ts), its onset recorded first; then, if it outlasted the watchdog,
   * the interruption and restart, and when steps resume.
   */
  private *hangEvents(
    hang: InjectedFault,
    step: number,
    t0: number,
    t1: number,
    compute: Float64Array,
    rng: Random,
  ): Generator<
    RankwatchEvent,
    { resumeTs: number; stopTs: number } | { resumeTs: undefined; restartedAt: number }
  > {
    hang.startTs = hang.onsetTs = hangStopTs(hang.spec, hang.rank!, t0, compute);
    const out = yield* hangPhase(this.hangJob(), hang.spec, hang.rank!, step, t0, t1, compute, rng);
    if (out.resumeTs !== undefined) return { resumeTs: out.resumeTs, stopTs: out.stopTs };
    return { resumeTs: undefined, restartedAt: yield* restartAfterHang(this.opts.job, out.endTs, step, rng) };
  }

  /** What a hang needs of the job. */
  private hangJob() {
    const o = this.opts;
    return {
      job: o.job,
      layout: this.layout,
      places: this.places,
      stepMs: o.stepMs,
      maxClock: this.maxClock,
      telemetry: o.telemetry,
      telemetryEveryMs: o.telemetryEveryMs ?? 1000,
    };
  }

  /** The ranks of a rank's data-parallel group (same stage and tensor-parallel index). */
  private dpGroupOf(rank: number): Set<number> {
    const c = this.places[rank];
    return new Set(this.places.filter((p) => p.stage === c.stage && p.tp === c.tp).map((p) => p.rank));
  }

  /** Product of every active fault's compute multiplier on rank r at `step`. */
  private computeFactor(r: number, step: number, skip?: InjectedFault): number {
    let f = 1;
    for (const fault of this.faults) {
      if (fault === skip || !isActive(fault.spec, step) || !fault.ranks.includes(r)) continue;
      f *= faultComputeFactor(fault.spec, step);
    }
    return f;
  }

  /** Time rank r stalls at `step` (ms) from stall faults, but `skip`: added to its compute, not scaled. */
  private stallMs(r: number, step: number, skip?: InjectedFault): number {
    let ms = 0;
    for (const [fault, plan] of this.stalls)
      if (fault !== skip && fault.rank === r && isActive(fault.spec, step)) ms += plan.get(step) ?? 0;
    return ms;
  }

  /**
   * Bandwidth divisor for a transfer from rank r (to `peer`, or -1 for a collective): a degraded
   * NIC slows everything through r's rail; a bad link slows only the r <-> peer pair.
   */
  private linkFactor(r: number, peer: number, step: number): number {
    let f = 1;
    for (const fault of this.faults) {
      if (fault.rank !== r || !isActive(fault.spec, step)) continue;
      if (fault.spec.type === 'nic') f *= fault.spec.factor ?? 3;
      if (fault.spec.type === 'flap' && flapSlow(fault.spec, step)) f *= fault.spec.factor ?? 3;
      if (fault.spec.type === 'link' && fault.spec.peer === peer) f *= fault.spec.factor ?? 3;
    }
    return f;
  }

  /** Bandwidth divisor on the tensor-parallel all-reduce of rank r's group: a degraded NVLink on r's GPU. */
  private nvlinkFactor(r: number, step: number): number {
    let f = 1;
    for (const fault of this.faults)
      if (fault.spec.type === 'nvlink' && fault.rank === r && isActive(fault.spec, step))
        f *= fault.spec.factor ?? 3;
    return f;
  }

  private accumulateCost(
    step: number,
    compute: Float64Array,
    clean: Float64Array,
    /** Each rank's share of a job-wide stall this step (in its compute, fault or not). */
    shared: Float64Array,
    stepMs: number,
    /** Exposed communication time the faults added this step. */
    commExtra: number,
    sums: { actual: number; without: number }[],
  ): void {
    this.faults.forEach((fault, i) => {
      if (!isActive(fault.spec, step) || isHang(fault.spec.type)) return;
      let without: number;
      if (['nic', 'link', 'flap', 'nvlink'].includes(fault.spec.type)) {
        without = stepMs - commExtra;
      } else {
        // Only the compute the fault slowed changes; the step's communication stays as it was.
        let m = 0;
        let actualMax = 0;
        for (let r = 0; r < compute.length; r++) {
          const c = fault.ranks.includes(r)
            ? clean[r] * this.computeFactor(r, step, fault) + shared[r] + this.stallMs(r, step, fault)
            : compute[r];
          if (c > m) m = c;
          if (compute[r] > actualMax) actualMax = compute[r];
        }
        without = stepMs - actualMax + m;
      }
      sums[i].actual += stepMs;
      sums[i].without += without;
    });
  }

  private *telemetry(
    t0: number,
    t1: number,
    step: number,
    idleMs: number,
    rng: Random,
    /** The GPUs' chosen multipliers (gpuOffsets, gpuOffsetSigma), by host slot. */
    silicon: Float64Array | undefined,
  ): Generator<RankwatchEvent> {
    const o = this.opts;
    const every = o.telemetryEveryMs ?? 1000;
    const first = Math.ceil((t0 + 1) / every) * every;
    for (let sec = first; sec <= t1; sec += every) {
      const idle = sec - t0 < idleMs;
      for (const p of this.places) {
        let clock = this.maxClock;
        let reasons = 0;
        let temp = 62 + 6 * rng.next();
        let power = 640 + 40 * rng.next();
        let util = 96 + 4 * rng.next();
        if (idle) {
          clock = 1000 + Math.round(200 * rng.next());
          reasons = 0x1;
          util = 3 * rng.next();
          power = 120;
        } else if (rng.chance(0.15)) {
          reasons = 0x4; // software power cap: common under load, not a fault
          clock = this.maxClock - Math.round(150 * rng.next());
        } else if (rng.chance(0.0005)) {
          reasons = 0x40; // a lone thermal blip: one sample must not fire
          clock = Math.round(this.maxClock * 0.85);
        }
        // A slower bin of silicon reaches the power limit before its top clock (Sinha et al., SC22:
        // same-SKU variation comes from power management): at the cap on every busy sample, drawing
        // what its peers draw, at the clock that makes its compute as slow as it is. Faster ones
        // run at their top clock: never above it.
        const m = silicon?.[(p.hostIndex * this.layout.gpusPerHost + p.gpu) % silicon.length] ?? 1;
        if (!idle && m > 1.005) {
          reasons = (reasons & ~0x4) | 0x4;
          clock = Math.min(clock, Math.round(this.maxClock * (1 - clockDropFor(m))));
          power = 690 + 10 * rng.next();
        }
        for (const f of this.faults) {
          if (idle || !isActive(f.spec, step) || !f.ranks.includes(p.rank)) continue;
          if (f.spec.type === 'throttle' && rng.chance(0.9)) {
            clock = Math.round(this.maxClock * (1 - (f.spec.depth ?? 0.2)) * (1 + 0.01 * rng.normal()));
            reasons |= 0x20 | 0x40;
            temp = 88 + 4 * rng.next();
          } else if (f.spec.type === 'power_brake') {
            clock = Math.round(this.maxClock * (1 - (f.spec.depth ?? 0.45)) * (1 + 0.01 * rng.normal()));
            reasons |= 0x80 | 0x8;
            power = 300 + 20 * rng.next();
          }
        }
        yield {
          v: 1,
          kind: 'gpu',
          ts: sec,
          host: p.host,
          gpu: p.gpu,
          job: o.job,
          rank: p.rank,
          sm_clock_mhz: clock,
          max_sm_clock_mhz: this.maxClock,
          power_w: Math.round(power),
          temp_c: Math.round(temp),
          util_pct: Math.round(util),
          throttle_reasons: reasons,
        };
      }
    }
  }
}

export function faultComputeFactor(spec: FaultSpec, step: number): number {
  switch (spec.type) {
    case 'throttle':
      return clockSlowdown(spec.depth ?? 0.2);
    case 'power_brake':
      return clockSlowdown(spec.depth ?? 0.45);
    case 'slow_rank':
      return 1 + (spec.slowdown ?? 0.1);
    case 'drift':
      return 1 + driftSlowdown(spec, step);
    case 'intermittent':
      return (step - spec.at) % (spec.every ?? 3) === 0 ? 1 + (spec.slowdown ?? 0.3) : 1;
    default:
      return 1;
  }
}

function xidMessage(code: number): string {
  const known: Record<number, string> = {
    48: 'Double Bit ECC Error',
    74: 'NVLink Error',
    79: 'GPU has fallen off the bus.',
    94: 'Contained ECC error.',
    95: 'Uncontained ECC error.',
  };
  return known[code] ?? `Xid ${code}`;
}

/** An event of the step's reports, held back for a group that waits for a hung rank, or passed on. */
function* pass<E extends RankwatchEvent>(
  held: RankwatchEvent[],
  hold: Set<number> | undefined,
  e: E,
): Generator<RankwatchEvent> {
  if (hold?.has((e as { rank: number }).rank)) held.push(e);
  else yield e;
}

/** A held report, `late` ms later: the step took that much longer, spent waiting (or hung, for the culprit). */
function resumed(e: RankwatchEvent, late: number, culprit: number): RankwatchEvent {
  if (e.kind !== 'step') return { ...e, ts: e.ts + late };
  const own = e.rank === culprit;
  return {
    ...e,
    ts: e.ts + late,
    step_ms: ms3(e.step_ms + late),
    compute_ms: ms3(e.compute_ms + (own ? late : 0)),
    comm_wait_ms: ms3((e.comm_wait_ms ?? 0) + (own ? 0 : late)),
  };
}

function maxOf(a: Float64Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) if (a[i] > m) m = a[i];
  return m;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** Milliseconds to the microsecond, as collectors report them. */
function ms3(x: number): number {
  return round(x, 3);
}
