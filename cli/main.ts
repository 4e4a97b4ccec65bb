/** rankwatch's command line: one file per command, one list here. */
import { RankwatchError } from '../core/errors.js';
import type { Command } from './args.js';
import { collect } from './commands/collect.js';
import { demo } from './commands/demo.js';
import { detect } from './commands/detect.js';
import { evaluate } from './commands/eval.js';
import { mfu } from './commands/mfu.js';
import { replay } from './commands/replay.js';
import { sim } from './commands/sim.js';
import { up } from './commands/up.js';

export const COMMANDS: Command[] = [demo, replay, sim, mfu, evaluate, up, detect, collect];

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
    return await cmd.run(rest);
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
