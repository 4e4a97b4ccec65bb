/** Flag parsing for every command: node's parseArgs, strict, with errors that name the flag. */
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { RankwatchError } from '../core/errors.js';

export type Options = NonNullable<ParseArgsConfig['options']>;

export function parse<O extends Options>(argv: string[], options: O, allowPositionals = false) {
  try {
    return parseArgs({
      args: argv,
      options: { ...options, help: { type: 'boolean', short: 'h' } },
      allowPositionals,
      strict: true,
    });
  } catch (err) {
    const message = (err as Error).message.split('\n')[0];
    // `--ranks -8`: parseArgs reads "-8" as a flag and calls the option ambiguous; say what it is.
    const ambiguous = /^Option '(-[^' ]+)[^']*' argument is ambiguous/.exec(message);
    if (ambiguous) {
      const at = argv.indexOf(ambiguous[1]);
      const given = at >= 0 ? argv[at + 1] : undefined;
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        `${ambiguous[1]} got "${given}", which reads as a flag; no rankwatch number is negative, ${ambiguous[1]}`,
      );
    }
    throw new RankwatchError('RANKWATCH_ERR_USAGE', message);
  }
}

/** What a number flag accepts beyond "a finite number, not negative". */
export interface NumRules {
  min?: number;
  max?: number;
  integer?: boolean;
  /** The value must be above `min` (not equal to it). */
  exclusiveMin?: boolean;
}

/** Flags that count things or name ports: whole numbers wherever they appear. */
const INTEGER_FLAGS = new Set(['ranks', 'steps', 'seed', 'rank', 'gpu', 'gpus', 'port', 'health-port']);

/** Rules every command gets for free from the flag's name, so no command forgets them. */
function rulesFor(flag: string): NumRules {
  if (flag === 'port' || flag.endsWith('-port')) return { min: 0, max: 65_535, integer: true };
  return { min: 0, integer: INTEGER_FLAGS.has(flag) };
}

/**
 * A number flag. Every rankwatch number is finite and not negative; ports are whole numbers up to
 * 65535; counts are whole. `rules` narrows further (e.g. `{ min: 1 }` for a count of ranks).
 */
export function num(
  value: string | undefined,
  flag: string,
  fallback?: number,
  rules: NumRules = {},
): number {
  if (value === undefined) {
    if (fallback === undefined) throw new RankwatchError('RANKWATCH_ERR_USAGE', `--${flag} is required`);
    return fallback;
  }
  const n = value.trim() === '' ? Number.NaN : Number(value);
  const r = { ...rulesFor(flag), ...rules };
  const bad = (what: string) =>
    new RankwatchError('RANKWATCH_ERR_USAGE', `--${flag} needs ${what}, got "${value}"`);
  if (!Number.isFinite(n)) throw bad('a number');
  if (r.integer && !Number.isInteger(n)) throw bad('a whole number');
  if (r.min !== undefined && (r.exclusiveMin ? n <= r.min : n < r.min))
    throw bad(r.exclusiveMin ? `a number above ${r.min}` : `a number of at least ${r.min}`);
  if (r.max !== undefined && n > r.max) throw bad(`a number of at most ${r.max}`);
  return n;
}

export interface Command {
  name: string;
  usage: string;
  run(argv: string[]): Promise<number>;
}
