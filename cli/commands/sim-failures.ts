/** `rankwatch sim --failures`: the failure process of a fleet (sim/failures.ts) as v1 events. */
import { writeFileSync } from 'node:fs';
import { RankwatchError } from '../../core/errors.js';
import { FAILURE_SIM_DEFAULTS, FailureSim } from '../../sim/failures.js';
import { defineOptions, type OptionValues, optionsHelp } from '../args.js';
import { LineWriter } from '../jsonl.js';

const D = FAILURE_SIM_DEFAULTS;

export const SIM_FAILURE_OPTIONS = defineOptions({
  failures: { kind: 'boolean', help: 'simulate failures, saves and restarts' },
  nodes: { kind: 'number', integer: true, min: 1, default: D.nodes, help: 'nodes in the fleet' },
  'gpus-per-node': { kind: 'number', integer: true, min: 1, default: D.gpusPerNode, help: 'GPUs a node' },
  jobs: { kind: 'number', integer: true, min: 1, default: D.jobs, help: 'jobs the nodes are split into' },
  days: { kind: 'number', arg: 'D', exclusiveMin: true, default: D.days, help: 'days of event time' },
  'rate-per-node-day': {
    kind: 'number',
    arg: 'R',
    defaultText: D.ratePerNodeDay.toPrecision(4),
    help: 'failures per node per day up',
  },
  causes: {
    kind: 'string',
    arg: '"A=w,B=w"',
    defaultText: 'Llama 3 Table 5 counts',
    help: 'cause mix by weight',
  },
  'interval-s': { kind: 'number', arg: 'S', default: D.intervalS, help: 'compute seconds between saves' },
  'save-s': { kind: 'number', arg: 'S', default: D.saveS, help: 'blocking save time' },
  'restart-s': { kind: 'number', arg: 'S', default: D.restartS, help: 'restart time' },
  'no-cause': {
    kind: 'boolean',
    help: 'leave the cause off job_event (only the fault on the host tells it)',
  },
});

export const SIM_FAILURES_HELP = `
A fleet's failures instead of one job's steps (--failures): Poisson failures per node with a cause
mix, saves every interval, restarts that cost time; no per-step events, so weeks of large fleets
stay small. Defaults: the Llama 3 405B run's rate and Table 5 cause mix; the --days end now
(--start: a fixed first event time instead).
${optionsHelp(SIM_FAILURE_OPTIONS)}`;

function parseCauses(v: string): { cause: string; weight: number }[] {
  return v
    .split(',')
    .filter(Boolean)
    .map((pair) => {
      const i = pair.lastIndexOf('=');
      const weight = Number(pair.slice(i + 1));
      if (i <= 0 || !Number.isFinite(weight) || weight < 0)
        throw new RankwatchError(
          'RANKWATCH_ERR_USAGE',
          `--causes: "${pair}" is not NAME=WEIGHT with a weight ≥ 0`,
        );
      return { cause: pair.slice(0, i).trim(), weight };
    });
}

/** What the failure simulation reads: its own options and some of `sim`'s (seed, start, job, GPU model, outputs). */
type FailureSimValues = OptionValues<typeof SIM_FAILURE_OPTIONS> & {
  seed: number;
  'gpu-model': string;
  job: string | undefined;
  out: string | undefined;
  truth: string | undefined;
};

/** `startTs`: the first event's time (sim.ts reads --start). */
export async function runFailureSim(v: FailureSimValues, startTs: number): Promise<number> {
  let sim: FailureSim;
  try {
    sim = new FailureSim({
      seed: v.seed,
      startTs,
      nodes: v.nodes,
      gpusPerNode: v['gpus-per-node'],
      jobs: v.jobs,
      days: v.days,
      gpuModel: v['gpu-model'],
      ratePerNodeDay: v['rate-per-node-day'],
      causes: v.causes === undefined ? undefined : parseCauses(v.causes),
      intervalS: v['interval-s'],
      saveS: v['save-s'],
      restartS: v['restart-s'],
      causeOnEvent: !v['no-cause'],
      jobPrefix: v.job,
    });
  } catch (err) {
    if (err instanceof RankwatchError) throw err;
    throw new RankwatchError('RANKWATCH_ERR_USAGE', (err as Error).message);
  }
  const out = new LineWriter(v.out);
  for (const e of sim.events()) await out.write(JSON.stringify(e));
  await out.close();
  if (v.truth) writeFileSync(v.truth, `${JSON.stringify(sim.truth(), null, 2)}\n`);
  return 0;
}
