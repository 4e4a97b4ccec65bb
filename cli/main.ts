/** rankwatch's command line: one file per command, their list in cli/command-list.ts. */
import { readFileSync } from 'node:fs';
import { boundHeapGrowth } from '../core/heap.js';
import { setLogDefaults } from '../core/log.js';
import { optionsHelp, resolveOptions } from './args.js';
import { COMMANDS } from './command-list.js';
import { explain } from './fail.js';
import { guardOutput, stopOnHangup } from './hangup.js';
import { PROCESS_OPTIONS } from './process-options.js';

function help(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `rankwatch: training-job observability and straggler detection

Usage: rankwatch <command> [options]    (rankwatch help <command> for its options; -V for the version)

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join('\n')}

Start with: rankwatch demo

Environment (every command):
${optionsHelp(PROCESS_OPTIONS)}`;
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
    // --help answers whatever the environment says (it is how a person finds what to fix).
    if (!rest.includes('--help') && !rest.includes('-h')) {
      const { values } = resolveOptions(PROCESS_OPTIONS, {});
      debug = values.debug;
      setLogDefaults({ level: values['log-level'], format: values['log-format'] });
      boundHeapGrowth(values['heap-growing-percent']); // before any command's state grows: see core/heap.ts
    }
    return await (await cmd.load()).run(rest);
  } catch (err) {
    return fail(err);
  }
}

let command = { name: '', argv: [] as string[] };
let debug = false;

/** Prints the one line for an error that ends the command; the stack only under RANKWATCH_DEBUG. */
function fail(err: unknown): number {
  const f = explain(err, command.name, command.argv);
  if (debug) console.error(err);
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

// EPIPE on stdout (`rankwatch sim | head`) stops quietly; a closed terminal's EIO is ignored.
guardOutput();

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
