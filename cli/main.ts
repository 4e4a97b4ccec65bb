/** rankwatch's command line: one file per command, one list here. */
import { RankwatchError } from '../core/errors.js';
import type { Command } from './args.js';

/**
 * One line per command; its module loads only when it runs, so `rankwatch mfu` does not pay for
 * the ClickHouse engine, Kafka client and HTTP server the other commands bring in.
 */
export const COMMANDS: { name: string; summary: string; load: () => Promise<Command> }[] = [
  {
    name: 'demo',
    summary: 'run a simulated 256-rank job with two faults through the embedded pipeline',
    load: async () => (await import('./commands/demo.js')).demo,
  },
  {
    name: 'replay',
    summary: 'run the detectors over recorded events, as fast as the CPU allows',
    load: async () => (await import('./commands/replay.js')).replay,
  },
  {
    name: 'sim',
    summary: 'write the events of a simulated training job as JSON lines',
    load: async () => (await import('./commands/sim.js')).sim,
  },
  {
    name: 'mfu',
    summary: 'compute model FLOPs utilisation from a model config and a step time',
    load: async () => (await import('./commands/mfu.js')).mfu,
  },
  {
    name: 'eval',
    summary: 'score the detectors on a matrix of simulated jobs: recall, time to detect, false alarms',
    load: async () => (await import('./commands/eval.js')).evaluate,
  },
  {
    name: 'up',
    summary: 'run the embedded pipeline with an HTTP ingest endpoint (single machine)',
    load: async () => (await import('./commands/up.js')).up,
  },
  {
    name: 'detect',
    summary: 'run the detectors as a member of a Kafka consumer group',
    load: async () => (await import('./commands/detect.js')).detect,
  },
  {
    name: 'collect',
    summary: 'run the node collector: dcgm-exporter, nvidia-smi, kernel XIDs, training logs → the bus',
    load: async () => (await import('./commands/collect.js')).collect,
  },
  {
    name: 'checkpoint',
    summary: 'checkpoint-interval advice (Young, Daly) from a save time and MTBF, or from a recorded job',
    load: async () => (await import('./commands/checkpoint.js')).checkpoint,
  },
  {
    name: 'failures',
    summary: 'recorded failure rates per cause/host/GPU model with 95% intervals, and MTBF for N GPUs',
    load: async () => (await import('./commands/failures.js')).failures,
  },
];

function help(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `rankwatch: training-job observability and straggler detection

Usage: rankwatch <command> [options]    (rankwatch <command> --help for its options)

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join('\n')}

Start with: rankwatch demo`;
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    console.log(help());
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === '-v') {
    console.log('rankwatch 0.1.0');
    return 0;
  }
  const cmd = COMMANDS.find((c) => c.name === name);
  if (!cmd) {
    console.error(`rankwatch: unknown command "${name}"\n\n${help()}`);
    return 2;
  }
  try {
    return await (await cmd.load()).run(rest);
  } catch (err) {
    if (err instanceof RankwatchError) {
      console.error(`rankwatch ${name}: ${err.describe()}`);
      return err.code === 'RANKWATCH_ERR_USAGE' ? 2 : 1;
    }
    throw err;
  }
}

// EPIPE on stdout (e.g. `rankwatch sim | head`) is a normal way to stop.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    console.error(err);
    process.exitCode = 1;
  },
);
