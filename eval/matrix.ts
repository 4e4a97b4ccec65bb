/**
 * The scenarios `rankwatch eval` runs: clean jobs (heterogeneous stages, stalls, spikes) and one
 * fault of each kind, over several seeds and job sizes. Fault placement and onset are drawn from
 * the seed, so every run is reproducible and no case is hand-picked.
 */
import { Random } from '../core/random.js';
import { ClusterSim, type SimOptions } from '../sim/cluster.js';
import type { FaultSpec } from '../sim/faults.js';
import { defaultLayout } from '../sim/topology.js';

export interface EvalCase {
  family: string;
  ranks: number;
  seed: number;
  sim: SimOptions;
}

export interface Family {
  name: string;
  /** Builds the fault for a job of `ranks` ranks, placed and timed by `rng`; none for clean jobs. */
  fault?: (ranks: number, rng: Random, seed: number) => FaultSpec;
  /** Extra simulator options (e.g. a costlier last stage). */
  sim?: (seed: number, ranks: number) => Partial<SimOptions>;
  /** Job sizes and seeds of its own, instead of the matrix's (the scale family). */
  sizes?: { ranks: number; seeds: number[] }[];
  /** Steps of its own, instead of the matrix's. */
  steps?: number;
}

const onset = (rng: Random) => 40 + rng.int(40);

/** What real jobs do that the simulator's defaults do not (issue 16): the field-like confounds. */
const fieldLike = (seed: number) => ({
  lateArrival: true,
  pauseProb: 0.3,
  rank0Checkpoint: true,
  checkpointEvery: 25,
  clockSkewMs: 2000,
  lastStageCost: seed % 2 ? 1.12 : 1.3,
});

/** One rank held up 3-6 s every 45-55 steps (issue 29). */
const stallEvery50 = (n: number, rng: Random): FaultSpec => ({
  type: 'stall',
  rank: rng.int(n),
  at: onset(rng),
  every: 50,
  jitter: 5,
  stall: [3, 6],
});

export const FAMILIES: Family[] = [
  // Alternate a mildly and a strongly heavier last stage: stage cost never makes a straggler.
  { name: 'clean', sim: (seed) => ({ lastStageCost: seed % 2 ? 1.12 : 1.3 }) },
  {
    name: 'throttle',
    fault: (n, rng) => ({ type: 'throttle', rank: rng.int(n), at: onset(rng), depth: 0.2 }),
  },
  {
    name: 'slow_rank 5%',
    fault: (n, rng) => ({ type: 'slow_rank', rank: rng.int(n), at: onset(rng), slowdown: 0.05 }),
  },
  {
    name: 'intermittent 30% 1-in-3',
    fault: (n, rng) => ({ type: 'intermittent', rank: rng.int(n), at: onset(rng), slowdown: 0.3, every: 3 }),
  },
  { name: 'nic /3', fault: (n, rng) => ({ type: 'nic', rank: rng.int(n), at: onset(rng), factor: 3 }) },
  {
    name: 'power_brake',
    fault: (n, rng) => ({ type: 'power_brake', host: rng.int(n / 8), at: onset(rng), depth: 0.45 }),
  },
  {
    name: 'link /3 (pair)',
    fault: (n, rng) => {
      const l = defaultLayout(n);
      const stride = l.tp * l.dp;
      const rank = rng.int(n - stride);
      return { type: 'link', rank, peer: rank + stride, at: onset(rng), factor: 3 };
    },
  },
  // Field-like cases (issue 16): what real jobs do that the simulator's defaults do not.
  {
    name: 'clean, field-like',
    sim: fieldLike,
  },
  { name: 'clean, elastic restart', sim: () => ({ restartAt: 100, renumber: true }) },
  {
    name: 'slow_rank 3%',
    fault: (n, rng) => ({ type: 'slow_rank', rank: rng.int(n), at: onset(rng), slowdown: 0.03 }),
  },
  {
    name: 'drift to 10% over 200 steps',
    fault: (n, rng) => ({ type: 'drift', rank: rng.int(n), at: onset(rng) - 30, slowdown: 0.1, ramp: 200 }),
  },
  {
    name: 'flapping rail /3 1-in-8',
    fault: (n, rng) => ({ type: 'flap', rank: rng.int(n), at: onset(rng), factor: 3, every: 8, burst: 1 }),
  },
  {
    name: 'flapping rail /2.5 bursts',
    fault: (n, rng) => ({ type: 'flap', rank: rng.int(n), at: onset(rng), factor: 2.5, every: 40, burst: 4 }),
  },
  {
    name: 'slow_rank 10%, late arrival',
    fault: (n, rng) => ({ type: 'slow_rank', rank: rng.int(n), at: onset(rng), slowdown: 0.1 }),
    sim: () => ({ lateArrival: true }),
  },
  {
    name: 'nvlink /3 + XID 74',
    fault: (n, rng) => ({ type: 'nvlink', rank: rng.int(n), at: onset(rng), factor: 3, code: 74 }),
  },
  {
    name: 'nvlink /2 (tp 2 pair)',
    fault: (n, rng) => ({ type: 'nvlink', rank: rng.int(n), at: onset(rng), factor: 2 }),
    sim: (_seed, ranks) => ({ layout: { tp: 2, pp: 4, dp: ranks / 8 } }),
  },
  // Issue 29: one rank held up 3-6 s every 45-55 steps (a data loader, a host process), alone and
  // among the field-like confounds; and the same stalls on every rank at once: the job's, no one's.
  // 400 steps: the onset (40-80) plus five periods.
  { name: 'stall 3-6 s every ~50 steps', fault: stallEvery50, steps: 400 },
  {
    name: 'stall 3-6 s every ~50 steps, field-like',
    fault: stallEvery50,
    sim: fieldLike,
    steps: 400,
  },
  {
    name: 'clean, shared stalls every ~50 steps',
    sim: () => ({ sharedStalls: { every: 50, jitter: 5, stall: [3, 6], at: 40 } }),
    steps: 400,
  },
];

/**
 * Fleets whose GPUs are not equally fast (issue 29): each GPU's own fixed speed offset drawn from
 * N(0, σ), 512-rank jobs. Clean, a GPU's offset is silicon, not a finding (the slowest GPUs are in
 * the job's ranking); a GPU that turns 4% slower than its own past is a change, found at its rank
 * however fast it was. Its GPU is drawn from the fastest quarter of the job's: a fast GPU that
 * slows stays at or below its peers' median, where a test against the peers cannot see it.
 */
const offsetFleet = (sigma: number) => () => ({ gpuOffsetSigma: sigma });
const OFFSET_SEEDS = [{ ranks: 512, seeds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }];
export const OFFSET_FAMILIES: Family[] = [
  ...[0.01, 0.025, 0.04].map((sigma) => ({
    name: `clean, GPU offsets ${sigma * 100}%`,
    sim: offsetFleet(sigma),
    sizes: OFFSET_SEEDS,
  })),
  {
    name: 'slow_rank 4%, fast GPU, offsets 2.5%',
    fault: (n, rng, seed) => {
      const speeds = new ClusterSim({ ranks: n, seed, steps: 1, gpuOffsetSigma: 0.025 }).gpuSpeeds();
      const fastest = [...speeds.keys()].sort((a, b) => speeds[a] - speeds[b]).slice(0, Math.max(1, n >> 2));
      return { type: 'slow_rank', rank: fastest[rng.int(fastest.length)], at: onset(rng), slowdown: 0.04 };
    },
    sim: offsetFleet(0.025),
    sizes: OFFSET_SEEDS,
  },
];

/**
 * Hangs (issue 29): one rank hangs at the top of a step, or right before its data-parallel
 * all-reduce, at 512 and 4,096 ranks, for 11 minutes: past the NCCL watchdog's 600 s, so the
 * peers' timeouts are judged too, then the job is interrupted and restarts. Placement and onset
 * drawn from the seed.
 */
const HANG_SIZES = [
  { ranks: 512, seeds: [1, 2, 3] },
  { ranks: 4096, seeds: [4, 5] },
];
export const HANG_FAMILIES: Family[] = [
  {
    name: 'hang at a step boundary',
    fault: (n, rng) => ({ type: 'hang', rank: rng.int(n), at: 30 + rng.int(30), for: 660 }),
    sizes: HANG_SIZES,
    steps: 100,
  },
  {
    name: 'hang before its DP all-reduce',
    fault: (n, rng) => ({ type: 'hang_allreduce', rank: rng.int(n), at: 30 + rng.int(30), for: 660 }),
    sizes: HANG_SIZES,
    steps: 100,
  },
];

/**
 * Scale: a 6% slow rank in 8,192- and 16,384-rank jobs must be found as fast as at 256 ranks,
 * at 1.2 s steps as in the field (the simulator keeps spikes per job-step fixed, see
 * `SimOptions.spikesPerStep`). Telemetry is off: a slow rank has no telemetry sign, and it
 * halves the events.
 */
export const SCALE_FAMILY: Family = {
  name: 'slow_rank 6% at 8k-16k ranks',
  fault: (n, rng) => ({ type: 'slow_rank', rank: rng.int(n), at: onset(rng), slowdown: 0.06 }),
  sim: () => ({ telemetry: false }),
  // Several seeds per size: one run's time to detect depends on its onset and draws.
  sizes: [
    { ranks: 8192, seeds: [6, 7, 8] },
    { ranks: 16384, seeds: [6, 7, 8] },
  ],
  steps: 140,
};

/** The same fault at 256 ranks, for comparison. */
const SCALE_BASE: Family = {
  name: 'slow_rank 6% at 256 ranks',
  fault: SCALE_FAMILY.fault,
  sim: SCALE_FAMILY.sim,
  sizes: [{ ranks: 256, seeds: [1, 2, 3, 6, 7, 8, 9, 10] }],
  steps: 140,
};

/**
 * Families the default matrix also runs at 1,024 and 4,096 ranks (issue 16: a 3% slow rank at 1k
 * and 4k); the others run at 256 ranks there, the scale rows at 8k and 16k (`--matrix scale`).
 */
const AT_4K = new Set(['slow_rank 5%', 'slow_rank 3%']);

/**
 * Families the default matrix runs with ten seeds at 256 ranks: where a drift's ramp starts and how
 * the rank's noise runs move its time to detect by ~25 s, so a median of three is one draw.
 */
const TEN_SEEDS = new Set(['drift to 10% over 200 steps']);

/**
 * Long clean jobs for the false-finding rate per 10,000 clean rank-hours: 1,024 ranks, 1,200
 * steps (~40 min of event time each) with every confound at once: first and last stages
 * costlier, data-loader stalls, spikes, checkpoint saves, collectives timed with late-arrival
 * waits, job-wide heavy-tailed pauses (GC, a slow filesystem step), rank 0 writing its
 * checkpoint inside its step, host clocks up to 2 s apart, and an elastic restart with
 * renumbered ranks halfway. GPU telemetry every 10 s (dcgm-exporter's default is 30 s) keeps
 * them affordable.
 */
const CLEAN_LONG: Family = {
  name: 'clean, all confounds (long)',
  sim: (seed) => ({
    ...fieldLike(seed),
    restartAt: 600,
    renumber: true,
    telemetryEveryMs: 10_000,
  }),
  sizes: [{ ranks: 1024, seeds: [21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35] }],
  steps: 1200,
};

export interface MatrixSpec {
  /** Job sizes, each with its seeds. */
  sizes: { ranks: number; seeds: number[] }[];
  steps: number;
  families: Family[];
}

export const MATRICES: Record<string, MatrixSpec> = {
  default: {
    sizes: [{ ranks: 256, seeds: [1, 2, 3] }],
    steps: 240,
    families: [
      ...FAMILIES.map((f) =>
        AT_4K.has(f.name)
          ? {
              ...f,
              sizes: [
                { ranks: 256, seeds: [1, 2, 3] },
                { ranks: 1024, seeds: [4, 6, 7] },
                { ranks: 4096, seeds: [5, 8] },
              ],
            }
          : TEN_SEEDS.has(f.name)
            ? { ...f, sizes: [{ ranks: 256, seeds: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }] }
            : f,
      ),
      ...OFFSET_FAMILIES,
      ...HANG_FAMILIES,
    ],
  },
  /** Every clean job: the default's clean families, then the long ones (the false-finding rates). */
  clean: {
    sizes: [
      { ranks: 256, seeds: [1, 2, 3] },
      { ranks: 1024, seeds: [4] },
    ],
    steps: 240,
    families: [
      ...FAMILIES.filter((f) => f.fault === undefined),
      ...OFFSET_FAMILIES.filter((f) => f.fault === undefined),
      CLEAN_LONG,
    ],
  },
  scale: { sizes: [], steps: 140, families: [SCALE_BASE, SCALE_FAMILY] },
  quick: {
    sizes: [{ ranks: 256, seeds: [1] }],
    steps: 200,
    families: [...FAMILIES, ...HANG_FAMILIES.map((f) => ({ ...f, sizes: [{ ranks: 512, seeds: [1] }] }))],
  },
  /** Every family at 256 ranks, for `--path inspector` (each job runs twice: native and through Inspector files). */
  inspector: { sizes: [{ ranks: 256, seeds: [1, 2, 3] }], steps: 240, families: FAMILIES },
  long: {
    sizes: [
      { ranks: 256, seeds: [1, 2, 3, 4, 5, 6, 7, 8] },
      { ranks: 1024, seeds: [9, 10] },
      { ranks: 4096, seeds: [11, 12] },
    ],
    steps: 600,
    families: FAMILIES,
  },
};

export function expand(m: MatrixSpec, extra: Partial<SimOptions> = {}): EvalCase[] {
  const cases: EvalCase[] = [];
  for (const fam of m.families) {
    for (const { ranks, seeds } of fam.sizes ?? m.sizes) {
      for (const seed of seeds) {
        const rng = new Random(seed * 7919 + ranks);
        const fault = fam.fault?.(ranks, rng, seed);
        cases.push({
          family: fam.name,
          ranks,
          seed,
          sim: {
            ranks,
            seed,
            steps: fam.steps ?? m.steps,
            faults: fault ? [fault] : [],
            job: `eval-${ranks}-${seed}`,
            ...fam.sim?.(seed, ranks),
            ...extra,
          },
        });
      }
    }
  }
  return cases;
}
