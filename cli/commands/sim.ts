import { closeSync, openSync, writeFileSync } from 'node:fs';
import { RankwatchError } from '../../core/errors.js';
import { ClusterSim, SIM_DEFAULTS } from '../../sim/cluster.js';
import { FAULT_TYPES, parseFault } from '../../sim/faults.js';
import { MODELS } from '../../sim/models.js';
import { type Command, num, parse } from '../args.js';
import { LineWriter } from '../jsonl.js';
import { runFailureSim, SIM_FAILURES_HELP, simFailureOptions } from './sim-failures.js';

export const simOptions = {
  ranks: { type: 'string' },
  steps: { type: 'string' },
  seed: { type: 'string' },
  job: { type: 'string' },
  'step-ms': { type: 'string' },
  model: { type: 'string' },
  'gpu-model': { type: 'string' },
  fault: { type: 'string', multiple: true },
  'no-telemetry': { type: 'boolean' },
  'no-collectives': { type: 'boolean' },
  start: { type: 'string' },
} as const;

export const SIM_FLAGS_HELP = `  --ranks N            ranks (GPUs) in the job: 1 to 8, or a multiple of 8 (default ${SIM_DEFAULTS.ranks})
  --steps N            optimizer steps (default ${SIM_DEFAULTS.steps})
  --seed N             random seed; same seed and --start, same events (default ${SIM_DEFAULTS.seed})
  --job ID             job id (default sim-SEED)
  --step-ms MS         typical step time (default ${SIM_DEFAULTS.stepMs})
  --model NAME         ${Object.keys(MODELS).join(', ')} (default ${SIM_DEFAULTS.model})
  --gpu-model NAME     GPU model (default ${SIM_DEFAULTS.gpuModel})
  --fault SPEC         inject a fault, repeatable: TYPE:key=value,...
                       types: ${FAULT_TYPES.join(', ')}
                       keys: rank, host, gpu, at (step), until, slowdown, every, depth, factor, code,
                       peer (link: the other end), jitter (stall: every ± jitter steps), stall
                       (stall: seconds, A-B or one number; its rank is held up, its peers wait)
                       e.g. throttle:rank=37,at=60  nic:rank=100,at=40,factor=3
                            stall:rank=12,at=40,every=50,jitter=5,stall=3-6
  --no-telemetry       leave out the 1 Hz gpu samples
  --no-collectives     leave out collective events
  --start ISO|MS       event time of the first event (default: now, to the minute, so a store keeps
                       the events: raw data older than its retention, 30 days by default, is
                       dropped at insert). Give one to get the same events on every run.`;

/** The first event's time: --start (ISO or epoch ms), or now to the minute. */
export function startFrom(start: string | undefined): number {
  if (start === undefined) return Math.floor(Date.now() / 60_000) * 60_000;
  const ts = /^\d+$/.test(start) ? Number(start) : Date.parse(start);
  if (!Number.isFinite(ts))
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `--start needs an ISO time or epoch milliseconds, got "${start}"`,
    );
  return ts;
}

export function simFromFlags(v: Record<string, unknown>): ClusterSim {
  const s = (k: string) => v[k] as string | undefined;
  const ranks = num(s('ranks'), 'ranks', SIM_DEFAULTS.ranks, { min: 1 });
  if (ranks > 8 && ranks % 8 !== 0)
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `--ranks needs 1 to 8 or a multiple of 8 (8 GPUs a host), got ${ranks}`,
    );
  const model = s('model');
  if (model !== undefined && !(model in MODELS))
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `--model "${model}" is not one of ${Object.keys(MODELS).join(', ')}`,
    );
  return new ClusterSim({
    ranks,
    steps: num(s('steps'), 'steps', SIM_DEFAULTS.steps, { min: 1 }),
    seed: num(s('seed'), 'seed', SIM_DEFAULTS.seed),
    job: s('job'),
    stepMs: num(s('step-ms'), 'step-ms', SIM_DEFAULTS.stepMs, { min: 0, exclusiveMin: true }),
    model,
    gpuModel: s('gpu-model'),
    faults: ((v.fault as string[] | undefined) ?? []).map(parseFault),
    telemetry: !v['no-telemetry'],
    collectives: !v['no-collectives'],
    startTs: startFrom(s('start')),
  });
}

export const sim: Command = {
  name: 'sim',
  usage: `rankwatch sim [options] > job.jsonl

Simulates a synchronous hybrid-parallel job (Megatron rank order, 8 GPUs per host) and writes
its v1 events, one JSON object per line, in event-time order.

${SIM_FLAGS_HELP}
  --truth FILE         also write what was injected (hosts, GPUs, onset, true cost) as JSON
  -o, --out FILE       write here instead of stdout
${SIM_FAILURES_HELP}`,
  async run(argv) {
    const { values } = parse(argv, {
      ...simOptions,
      truth: { type: 'string' },
      out: { type: 'string', short: 'o' },
      ...simFailureOptions,
    });
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    if (values.failures) return runFailureSim(values);
    const simulation = simFromFlags(values);
    // Both outputs are opened before the first event, so a bad path fails before any work.
    const truth = values.truth === undefined ? undefined : openSync(values.truth, 'w');
    const out = new LineWriter(values.out);
    for (const e of simulation.events()) await out.write(JSON.stringify(e));
    await out.close();
    if (truth !== undefined) {
      writeFileSync(truth, `${JSON.stringify(simulation.faults, null, 2)}\n`);
      closeSync(truth);
    }
    return 0;
  },
};
