import { closeSync, openSync, statSync, writeFileSync } from 'node:fs';
import { RankwatchError } from '../../core/errors.js';
import { ClusterSim, SIM_DEFAULTS } from '../../sim/cluster.js';
import { FAULT_TYPES, parseFault } from '../../sim/faults.js';
import { FlightRecorderReport } from '../../sim/flight-recorder.js';
import { InspectorDumps } from '../../sim/inspector.js';
import { MODELS } from '../../sim/models.js';
import { type Command, defineOptions, type OptionValues, optionsHelp, parseOptions } from '../args.js';
import { LineWriter } from '../jsonl.js';
import { runFailureSim, SIM_FAILURE_OPTIONS, SIM_FAILURES_HELP } from './sim-failures.js';

export const SIM_OPTIONS = defineOptions({
  ranks: {
    kind: 'number',
    integer: true,
    min: 1,
    default: SIM_DEFAULTS.ranks,
    help: 'ranks (GPUs) in the job: 1 to 8, or a multiple of 8',
  },
  steps: { kind: 'number', integer: true, min: 1, default: SIM_DEFAULTS.steps, help: 'optimizer steps' },
  seed: {
    kind: 'number',
    integer: true,
    default: SIM_DEFAULTS.seed,
    help: 'random seed; same seed and --start, same events',
  },
  job: { kind: 'string', arg: 'ID', defaultText: 'sim-SEED', help: 'job id' },
  'step-ms': {
    kind: 'number',
    arg: 'MS',
    exclusiveMin: true,
    default: SIM_DEFAULTS.stepMs,
    help: 'typical step time',
  },
  model: {
    kind: 'enum',
    values: Object.keys(MODELS),
    arg: 'NAME',
    default: SIM_DEFAULTS.model,
    help: Object.keys(MODELS).join(', '),
  },
  'gpu-model': { kind: 'string', arg: 'NAME', default: SIM_DEFAULTS.gpuModel, help: 'GPU model' },
  fault: {
    kind: 'string',
    multiple: true,
    arg: 'SPEC',
    help: `inject a fault, repeatable: TYPE:key=value,... types: ${FAULT_TYPES.join(', ')}; keys: rank, host, gpu, at (step), until, slowdown, every, depth, factor, code, peer (link: the other end), for (hang: seconds hung, default 660; past 600 the peers' NCCL watchdogs fire and the job restarts), jitter (stall: every ± jitter steps), stall (stall: seconds, A-B or one number; its rank is held up, its peers wait); e.g. throttle:rank=37,at=60 nic:rank=100,at=40,factor=3 hang:rank=301,at=50 stall:rank=12,at=40,every=50,jitter=5,stall=3-6. hang: the rank stops at the top of step 'at'; hang_allreduce: right before its data-parallel all-reduce; its peers spin in NCCL, its GPU goes idle`,
  },
  'gpu-offsets': {
    kind: 'number',
    arg: 'SIGMA',
    max: 0.2,
    default: 0,
    help: 'give each GPU its own fixed speed offset, drawn from N(0, SIGMA) (seeded), e.g. 0.025 for 2.5%: silicon and cooling variation, not a fault (a slower GPU runs at its power cap, at a lower clock)',
  },
  'no-telemetry': { kind: 'boolean', help: 'leave out the 1 Hz gpu samples' },
  'no-collectives': { kind: 'boolean', help: 'leave out collective events' },
  start: {
    kind: 'string',
    arg: 'ISO|MS',
    defaultText: 'now, to the minute',
    help: 'event time of the first event; give one to get the same events on every run (now keeps the events in a store: raw data older than its retention, 30 days by default, is dropped at insert)',
  },
});

export type SimValues = OptionValues<typeof SIM_OPTIONS>;

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

export function simFromFlags(v: SimValues): ClusterSim {
  const ranks = v.ranks;
  if (ranks > 8 && ranks % 8 !== 0)
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `--ranks needs 1 to 8 or a multiple of 8 (8 GPUs a host), got ${ranks}`,
    );
  return new ClusterSim({
    ranks,
    steps: v.steps,
    seed: v.seed,
    job: v.job,
    stepMs: v['step-ms'],
    model: v.model,
    gpuModel: v['gpu-model'],
    faults: v.fault.map(parseFault),
    telemetry: !v['no-telemetry'],
    collectives: !v['no-collectives'],
    startTs: startFrom(v.start),
    gpuOffsetSigma: v['gpu-offsets'] || undefined,
  });
}

const OUTPUT_OPTIONS = defineOptions({
  truth: {
    kind: 'file',
    help: 'also write what was injected (hosts, GPUs, onset, true cost) as JSON',
  },
  out: { kind: 'file', short: 'o', help: 'write here instead of stdout' },
  'inspector-dir': {
    kind: 'file',
    arg: 'DIR',
    help: "also write what NCCL Inspector would: one dump file per process in DIR (<host>-pid<pid>.log, the plugin's format), one record per collective operation; step events then carry their pid (as the Python hook sends them) and collective events are left out (they come from the files). Read them with: rankwatch collect --nccl-inspector DIR --nccl-inspector-all-hosts",
  },
  'inspector-dump-us': {
    kind: 'number',
    arg: 'N',
    integer: true,
    min: 1,
    defaultText: '500',
    help: 'each process dumps every N µs (NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS); records are dated by their dump',
  },
  'inspector-verbose': {
    kind: 'boolean',
    help: 'records carry their kernel times (NCCL_INSPECTOR_DUMP_VERBOSE=1)',
  },
  'inspector-ops': {
    kind: 'number',
    arg: 'N',
    integer: true,
    min: 1,
    defaultText: '1',
    help: 'operations each simulated collective is reported as',
  },
  'flight-recorder-report': {
    kind: 'file',
    help: "also write what PyTorch's Flight Recorder analyzer (fr_trace) would print of the dumps the ranks write when a hang outlasts the watchdog: which ranks never joined which collective (empty when no watchdog fired)",
  },
});

const OPTIONS = defineOptions({ ...SIM_OPTIONS, ...OUTPUT_OPTIONS, ...SIM_FAILURE_OPTIONS });

export const sim: Command = {
  name: 'sim',
  usage: `rankwatch sim [options] > job.jsonl

Simulates a synchronous hybrid-parallel job (Megatron rank order, 8 GPUs per host) and writes
its v1 events, one JSON object per line, in event-time order.

${optionsHelp(SIM_OPTIONS)}
${optionsHelp(OUTPUT_OPTIONS)}
${SIM_FAILURES_HELP}`,
  options: OPTIONS,
  async run(argv) {
    const { values } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    // By default the simulated days end now (to the minute), so a store keeps them (raw events
    // past its retention are dropped at insert); --start gives a fixed time, the same events every run.
    if (values.failures)
      return runFailureSim(
        values,
        values.start === undefined
          ? startFrom(undefined) - values.days * 86_400_000
          : startFrom(values.start),
      );
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
function inspectorDumps(sim: ClusterSim, v: OptionValues<typeof OPTIONS>): InspectorDumps | undefined {
  const dir = v['inspector-dir'];
  const flags = (['inspector-dump-us', 'inspector-verbose', 'inspector-ops'] as const).filter(
    (k) => v[k] !== undefined && v[k] !== false,
  );
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
    dumpIntervalUs: v['inspector-dump-us'] ?? 500,
    verbose: v['inspector-verbose'] === true,
    opsPerCollective: v['inspector-ops'] ?? 1,
  });
}
