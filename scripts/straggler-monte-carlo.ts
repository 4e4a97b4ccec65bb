/**
 * The straggler detector's false-alarm rate and time to detect, by Monte Carlo of the detector as
 * coded (docs/detectors.md, false-alarm design): `StragglerDetector` fed synthetic step frames, one
 * pipeline stage of GPUs with fixed offsets N(0, --offsets), Gaussian per-step noise 1.5% and a
 * job-wide jitter of 2% (which cancels), with no spikes unless --spikes gives a rate.
 *
 *   node --import tsx scripts/straggler-monte-carlo.ts false --jobs 10 [--ranks 4096] [--steps 1200] [--levelH 11]
 *   node --import tsx scripts/straggler-monte-carlo.ts ttd --pct 3 [--jobs 300] [--ranks 256] [--fast]
 *
 * `false` prints findings per rank-step by the test that fired; `ttd` injects one slowdown of
 * --pct percent at a step drawn from 40-79 (on the fastest GPU with --fast) and prints the steps to
 * find it. Any StragglerConfig number can be set (--levelK 0.75 --levelH 12 ...). At ~200 ns a
 * rank-step, 10⁹ rank-steps take a few minutes of one core.
 */
import { parseArgs } from 'node:util';
import { Random } from '../core/random.js';
import { FindingLog } from '../detectors/findings.js';
import { RankTable, type StepFrame } from '../detectors/steps.js';
import {
  STRAGGLER_DEFAULTS,
  type StragglerConfig,
  StragglerDetector,
} from '../detectors/straggler/straggler.js';
import type { Finding } from '../schema/finding.js';

interface Job {
  ranks: number;
  steps: number;
  offsets: number;
  spikes: number;
  /** One GPU turning `pct` percent slower at step `at`; rank -1: the job's fastest GPU. */
  shift?: { rank: number; at: number; pct: number };
}

const NOISE = 0.015;

/** One job through a fresh detector; returns its findings and each step's event time. */
function runJob(cfg: StragglerConfig, job: Job, rng: Random): { findings: Finding[]; stepTs: number[] } {
  const n = job.ranks;
  const ranks = new RankTable(n);
  for (let r = 0; r < n; r++) ranks.learn(r, `h${r >> 3}`, r & 7, 0);
  const findings: Finding[] = [];
  const d = new StragglerDetector('mc', ranks, new FindingLog(findings), cfg);
  const speed = Float64Array.from({ length: n }, () => 1 + job.offsets * rng.normal());
  const f: StepFrame = {
    step: 0,
    ts: 0,
    firstTs: 0,
    count: n,
    seen: new Uint8Array(n).fill(1),
    compute: new Float64Array(n),
    commWait: new Float64Array(n),
    stepMs: new Float64Array(n),
    tokens: 0,
  };
  const stepTs: number[] = [];
  const sh = job.shift;
  if (sh && sh.rank < 0) sh.rank = speed.indexOf(Math.min(...speed));
  let ts = 0;
  for (let t = 0; t < job.steps; t++) {
    const jobWide = Math.exp(0.02 * rng.normal());
    let slowest = 0;
    for (let r = 0; r < n; r++) {
      let c = 1000 * speed[r] * jobWide * Math.exp(NOISE * rng.normal());
      if (job.spikes && rng.chance(job.spikes)) c *= 1.5 + 1.5 * rng.next();
      if (sh && r === sh.rank && t >= sh.at) c *= 1 + sh.pct / 100;
      f.compute[r] = c;
      if (c > slowest) slowest = c;
    }
    ts += slowest + 80;
    for (let r = 0; r < n; r++) {
      f.stepMs[r] = slowest + 80;
      f.commWait[r] = slowest + 20 - f.compute[r];
    }
    f.step = t;
    f.ts = ts;
    f.firstTs = ts;
    stepTs.push(ts);
    d.process(f);
    if (sh && t > sh.at && findings.some((x) => x.rank === sh.rank && x.state === 'open')) break;
  }
  return { findings, stepTs };
}

const numbers = [
  'jobs',
  'ranks',
  'steps',
  'seed',
  'offsets',
  'spikes',
  'pct',
  ...Object.keys(STRAGGLER_DEFAULTS),
];
const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    fast: { type: 'boolean' },
    ...Object.fromEntries(numbers.map((k) => [k, { type: 'string' as const }])),
  },
});
const mode = positionals[0] ?? 'false';
const given = values as Record<string, string | boolean | undefined>;
const num = (k: string, fallback: number) => (given[k] === undefined ? fallback : Number(given[k]));
const cfg: StragglerConfig = { ...STRAGGLER_DEFAULTS };
for (const k of Object.keys(cfg) as (keyof StragglerConfig)[]) cfg[k] = num(k, cfg[k]);
const rng = new Random(num('seed', 1));
const offsets = num('offsets', 0.025);

if (mode === 'false') {
  const ranks = num('ranks', 4096);
  const steps = num('steps', 1200);
  const byTest: Record<string, number> = {};
  let rankSteps = 0;
  const t0 = performance.now();
  for (let j = 0; j < num('jobs', 10); j++) {
    const { findings } = runJob(cfg, { ranks, steps, offsets, spikes: num('spikes', 0) }, rng);
    rankSteps += ranks * steps;
    for (const x of findings.filter((x) => x.state === 'open')) {
      const test = String(x.evidence.trigger);
      byTest[test] = (byTest[test] ?? 0) + 1;
    }
  }
  const found = Object.values(byTest).reduce((a, b) => a + b, 0);
  console.log(
    JSON.stringify({
      levelK: cfg.levelK,
      levelH: cfg.levelH,
      rankSteps,
      findings: byTest,
      perRankStep: found / rankSteps,
      seconds: Math.round((performance.now() - t0) / 1000),
    }),
  );
} else {
  const ranks = num('ranks', 256);
  const took: number[] = [];
  let missed = 0;
  for (let j = 0; j < num('jobs', 300); j++) {
    const at = 40 + rng.int(40);
    const shift = { rank: given.fast ? -1 : rng.int(ranks), at, pct: num('pct', 3) };
    const job: Job = { ranks, steps: at + 200, offsets: num('offsets', 0.004), spikes: 0, shift };
    const { findings, stepTs } = runJob(cfg, job, rng);
    const first = findings.find((x) => x.state === 'open' && x.rank === shift.rank);
    if (first) took.push(stepTs.indexOf(first.ts) - at + 1);
    else missed++;
  }
  took.sort((a, b) => a - b);
  console.log(
    JSON.stringify({
      levelK: cfg.levelK,
      levelH: cfg.levelH,
      pct: num('pct', 3),
      stepsMedian: took[took.length >> 1],
      stepsP90: took[Math.floor(took.length * 0.9)],
      stepsWorst: took.at(-1),
      missed,
    }),
  );
}
