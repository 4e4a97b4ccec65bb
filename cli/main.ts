/** rankwatch's command line: one file per command, one list here. */
import { readFileSync } from 'node:fs';
import { boundHeapGrowth } from '../core/heap.js';
import type { Command } from './args.js';
import { explain } from './fail.js';
import { stopOnHangup } from './hangup.js';

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
    name: 'serve',
    summary: 'serve the read API (jobs, findings, nodes) over a ClickHouse server or a chDB folder',
    load: async () => (await import('./commands/serve.js')).serve,
  },
  {
    name: 'jobs',
    summary: 'list jobs: status, size, MFU, open findings',
    load: async () => (await import('./commands/jobs.js')).jobs,
  },
  {
    name: 'report',
    summary: "one job's report: MFU, tokens/s, step time, findings by cost, hosts",
    load: async () => (await import('./commands/report.js')).report,
  },
  {
    name: 'findings',
    summary: 'list findings, newest first (--job, --open)',
    load: async () => (await import('./commands/findings.js')).findings,
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

Usage: rankwatch <command> [options]    (rankwatch help <command> for its options; -V for the version)

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join('\n')}

Start with: rankwatch demo`;
}

/** The version in package.json, read at run time so it cannot drift from what npm installed. */
function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

export async function main(argv: string[]): Promise<number> {
  let [name, ...rest] = argv;
  if (name === 'help' && rest.length > 0) {
    // `rankwatch help sim` is `rankwatch sim --help`.
    [name, rest] = [rest[0], ['--help']];
  }
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    console.log(help());
    return name === undefined ? 2 : 0;
  }
  if (name === '--version' || name === '-V' || name === '-v' || name === 'version') {
    console.log(`rankwatch ${version()}`);
    return 0;
  }
  const cmd = COMMANDS.find((c) => c.name === name);
  if (!cmd) {
    console.error(`rankwatch: unknown command "${name}"\n\n${help()}`);
    return 2;
  }
  command = { name, argv: rest };
  watchParent();
  try {
    boundHeapGrowth(); // before any command's state grows: see core/heap.ts
    return await (await cmd.load()).run(rest);
  } catch (err) {
    return fail(err);
  }
}

let command = { name: '', argv: [] as string[] };

/** Prints the one line for an error that ends the command; the stack only under RANKWATCH_DEBUG. */
function fail(err: unknown): number {
  const f = explain(err, command.name, command.argv);
  if (process.env.RANKWATCH_DEBUG) console.error(err);
  console.error(f.line);
  return f.exit;
}

/**
 * Run through `npx` or `npm start`, rankwatch is a grandchild of npm: npm forwards SIGINT and
 * SIGTERM, but a parent killed outright (SIGKILL, a closed CI step) forwards nothing and would leave
 * `up` running, orphaned, holding its port and data folder. So under npm (and only there: a daemon
 * started by systemd or nohup is meant to outlive whoever started it) we check once a second whether
 * we were re-parented and, if so, stop as on SIGTERM: drained and closed.
 */
function watchParent(): void {
  if (!process.env.npm_command && !process.env.npm_lifecycle_event) return;
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid !== parent) {
      clearInterval(timer);
      console.error(`rankwatch ${command.name}: the npm process that started it is gone; stopping`);
      process.kill(process.pid, 'SIGTERM');
    }
  }, 1000);
  timer.unref();
}

// A closed terminal (SIGHUP) stops a command the way Ctrl-C does, so `up` drains before it exits
// instead of dying mid-write; under a supervisor, send SIGTERM (systemd's default KillSignal).
// `up` and `serve` take a SIGHUP sent on purpose as "re-read --auth" (cli/hangup.ts).
stopOnHangup();

// EPIPE on stdout (e.g. `rankwatch sim | head`) is a normal way to stop.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

// An error thrown outside the command's own await (a stream's 'error' event, a server callback)
// still becomes one line, not a stack trace.
process.on('uncaughtException', (err) => {
  process.exit(fail(err));
});

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.exitCode = fail(err);
  },
);
