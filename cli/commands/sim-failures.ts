/** `rankwatch sim --failures`: the failure process of a fleet (sim/failures.ts) as v1 events. */
import { writeFileSync } from 'node:fs';
import { RankwatchError } from '../../core/errors.js';
import { FAILURE_SIM_DEFAULTS, FailureSim } from '../../sim/failures.js';
import { num } from '../args.js';
import { LineWriter } from '../jsonl.js';

export const simFailureOptions = {
  failures: { type: 'boolean' },
  nodes: { type: 'string' },
  'gpus-per-node': { type: 'string' },
  jobs: { type: 'string' },
  days: { type: 'string' },
  'rate-per-node-day': { type: 'string' },
  causes: { type: 'string' },
  'interval-s': { type: 'string' },
  'save-s': { type: 'string' },
  'restart-s': { type: 'string' },
  'no-cause': { type: 'boolean' },
} as const;

const D = FAILURE_SIM_DEFAULTS;
export const SIM_FAILURES_HELP = `
A fleet's failures instead of one job's steps (--failures): Poisson failures per node with a cause
mix, saves every interval, restarts that cost time; no per-step events, so weeks of large fleets
stay small. Defaults: the Llama 3 405B run's rate and Table 5 cause mix.
  --failures               simulate failures, saves and restarts
  --nodes N                nodes in the fleet (default ${D.nodes})
  --gpus-per-node N        (default ${D.gpusPerNode})
  --jobs N                 jobs the nodes are split into (default ${D.jobs})
  --days D                 days of event time (default ${D.days})
  --rate-per-node-day R    failures per node per day up (default ${D.ratePerNodeDay.toPrecision(4)})
  --causes "A=w,B=w"       cause mix by weight (default Llama 3 Table 5 counts)
  --interval-s S           compute seconds between saves (default ${D.intervalS})
  --save-s S               blocking save time (default ${D.saveS})
  --restart-s S            restart time (default ${D.restartS})
  --no-cause               leave the cause off job_event (only the fault on the host tells it)`;

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

export async function runFailureSim(v: Record<string, unknown>): Promise<number> {
  const s = (k: string) => v[k] as string | undefined;
  const n = (k: string) => (s(k) === undefined ? undefined : num(s(k), k));
  const start = s('start');
  let sim: FailureSim;
  try {
    sim = new FailureSim({
      seed: n('seed'),
      startTs: start === undefined ? undefined : /^\d+$/.test(start) ? Number(start) : Date.parse(start),
      nodes: n('nodes'),
      gpusPerNode: n('gpus-per-node'),
      jobs: n('jobs'),
      days: n('days'),
      gpuModel: s('gpu-model'),
      ratePerNodeDay: n('rate-per-node-day'),
      causes: s('causes') === undefined ? undefined : parseCauses(s('causes')!),
      intervalS: n('interval-s'),
      saveS: n('save-s'),
      restartS: n('restart-s'),
      causeOnEvent: !v['no-cause'],
      jobPrefix: s('job'),
    });
  } catch (err) {
    if (err instanceof RankwatchError) throw err;
    throw new RankwatchError('RANKWATCH_ERR_USAGE', (err as Error).message);
  }
  const out = new LineWriter(s('out'));
  for (const e of sim.events()) await out.write(JSON.stringify(e));
  await out.close();
  if (s('truth')) writeFileSync(s('truth')!, `${JSON.stringify(sim.truth(), null, 2)}\n`);
  return 0;
}
