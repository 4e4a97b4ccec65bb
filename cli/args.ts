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
    throw new RankwatchError('RANKWATCH_ERR_USAGE', (err as Error).message.split('\n')[0]);
  }
}

export function num(value: string | undefined, flag: string, fallback?: number): number {
  if (value === undefined) {
    if (fallback === undefined) throw new RankwatchError('RANKWATCH_ERR_USAGE', `--${flag} is required`);
    return fallback;
  }
  const n = Number(value);
  if (!Number.isFinite(n))
    throw new RankwatchError('RANKWATCH_ERR_USAGE', `--${flag} needs a number, got "${value}"`);
  return n;
}

export interface Command {
  name: string;
  usage: string;
  run(argv: string[]): Promise<number>;
}
