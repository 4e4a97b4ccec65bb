import { closeSync, openSync, statSync, writeFileSync } from 'node:fs';
import { RankwatchError } from '../../core/errors.js';
import { ClusterSim, SIM_DEFAULTS } from '../../sim/cluster.js';
import { FAULT_TYPES, parseFault } from '../../sim/faults.js';
import { FlightRecorderReport } from '../../sim/flight-recorder.js';
import { InspectorDumps } from '../../sim/inspector.js';
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
                       peer (link: the other end)
                       e.g. throttle:rank=37,at=60  nic:rank=100,at=40,factor=3
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
  --inspector-dir DIR  also write what NCCL Inspector would: one dump file per process in DIR
                       (<host>-pid<pid>.log, the plugin's format), one record per collective
                       operation; step events then carry their pid (as the Python hook sends
                       them) and collective events are left out (they come from the files).
                       Read them with: rankwatch collect --nccl-inspector DIR --nccl-inspector-all-hosts
  --inspector-dump-us N  each process dumps every N µs (NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS,
                       default 500); records are dated by their dump
  --inspector-verbose  records carry their kernel times (NCCL_INSPECTOR_DUMP_VERBOSE=1)
  --inspector-ops N    operations each simulated collective is reported as (default 1)
  --flight-recorder-report FILE  also write what PyTorch's Flight Recorder analyzer (fr_trace) would
                       print: which ranks never joined which collective when ranks hang (empty
                       when none did)
${SIM_FAILURES_HELP}`,
  async run(argv) {
    const { values } = parse(argv, {
      ...simOptions,
      truth: { type: 'string' },
      out: { type: 'string', short: 'o' },
      'inspector-dir': { type: 'string' },
      'inspector-dump-us': { type: 'string' },
      'inspector-verbose': { type: 'boolean' },
      'inspector-ops': { type: 'string' },
      'flight-recorder-report': { type: 'string' },
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
    const dumps = inspectorDumps(simulation, values);
    const fr = values['flight-recorder-report'];
    const frFile = fr === undefined ? undefined : openSync(fr, 'w');
    const recorder = fr === undefined ? undefined : new FlightRecorderReport(simulation);
    for (const e of simulation.events()) {
      recorder?.take(e);
      const sent = dumps ? dumps.take(e) : e;
      if (sent) await out.write(JSON.stringify(sent));
    }
    dumps?.close();
    await out.close();
    if (frFile !== undefined && recorder) {
      writeFileSync(frFile, recorder.text());
      closeSync(frFile);
    }
    if (truth !== undefined) {
      writeFileSync(truth, `${JSON.stringify(simulation.faults, null, 2)}\n`);
      closeSync(truth);
    }
    return 0;
  },
};

/** The Inspector dump writer --inspector-dir asks for, checked before any event is made. */
function inspectorDumps(sim: ClusterSim, v: Record<string, unknown>): InspectorDumps | undefined {
  const dir = v['inspector-dir'] as string | undefined;
  const flags = ['inspector-dump-us', 'inspector-verbose', 'inspector-ops'].filter((k) => v[k] !== undefined);
  if (dir === undefined) {
    if (flags.length)
      throw new RankwatchError('RANKWATCH_ERR_USAGE', `--${flags[0]} needs --inspector-dir DIR`);
    return undefined;
  }
  if (statSync(dir, { throwIfNoEntry: false })?.isFile())
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `--inspector-dir ${dir} is a file: give a folder (it is created when missing)`,
    );
  return new InspectorDumps(sim, {
    dir,
    dumpIntervalUs: num(v['inspector-dump-us'] as string | undefined, 'inspector-dump-us', 500, { min: 1 }),
    verbose: v['inspector-verbose'] === true,
    opsPerCollective: num(v['inspector-ops'] as string | undefined, 'inspector-ops', 1, {
      min: 1,
      integer: true,
    }),
  });
}
