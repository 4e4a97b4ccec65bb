/**
 * Every rankwatch option, parsed one way.
 *
 * A command declares each of its options once, as data (`defineOptions`, keyed by the flag without
 * `--`): its kind (string, number with its rules, boolean, list, URL, enum, file), its environment
 * twin if it has one (`env`), its default and a one-line help. `parseOptions` reads the command
 * line with node's parseArgs (strict: an unknown flag is an error), then takes each option from the
 * flag, else its variable, else its default, and checks the value by its kind the same way
 * whichever it came from. Every problem is reported at once, in one line that names the flag and
 * its variable (RANKWATCH_ERR_USAGE: exit 2). An empty variable counts as unset. An option with
 * `envOnly` has no flag (a secret: flags show in `ps`).
 *
 * The `--help` options block (`optionsHelp`) and the table of variables in docs/operations.md
 * (cli/options-doc.ts) are generated from the same declarations; cli/options.test.ts walks every
 * command's declarations and checks each flag against its variable, both ways. A new option is one
 * more entry in its command's (or group's) declarations, read from the parsed values, never from
 * process.env; a new variable needs `node --import tsx scripts/options-doc.ts` for the docs.
 */
import { parseArgs } from 'node:util';
import { RankwatchError } from '../core/errors.js';

interface Common {
  /** One line for --help (wrapped there): what the option does. The default is added from `default`. */
  help: string;
  /** The environment variable that stands in for the flag. */
  env?: string;
  /** Set through `env` only: no flag. */
  envOnly?: boolean;
  /** The value's placeholder in --help (URL, N, FILE…). */
  arg?: string;
  /** A one-letter alias (`-o`). */
  short?: string;
  /** How --help words a default the parser does not apply itself (one that depends on other options). */
  defaultText?: string;
  /** A valid value where the kind alone cannot make one (for the twin test and the docs). */
  example?: string;
}

/** What a number option accepts beyond "a finite number, not negative". */
export interface NumRules {
  /** Default 0: no rankwatch number is negative. */
  min?: number;
  max?: number;
  integer?: boolean;
  /** The value must be above `min` (not equal to it). */
  exclusiveMin?: boolean;
  /** Said in messages: "a number of minutes above 0". */
  unit?: string;
}

export type OptionSpec =
  | (Common & { kind: 'string'; default?: string; multiple?: boolean })
  | (Common & { kind: 'file'; default?: string })
  | (Common & NumRules & { kind: 'number'; default?: number })
  | (Common & { kind: 'boolean' })
  | (Common & { kind: 'list'; item?: 'url' | 'host:port'; default?: readonly string[] })
  | (Common & { kind: 'url'; default?: string })
  | (Common & { kind: 'enum'; values: readonly string[]; default?: string });

export type Options = Readonly<Record<string, OptionSpec>>;

type ValueOf<S> = S extends { kind: 'number' }
  ? number
  : S extends { kind: 'boolean' }
    ? boolean
    : S extends { kind: 'list' }
      ? string[]
      : S extends { multiple: true }
        ? string[]
        : S extends { kind: 'enum'; values: readonly (infer V)[] }
          ? V
          : string;
type Always<S> = S extends { kind: 'boolean' } | { kind: 'list' } | { multiple: true } | { default: unknown }
  ? true
  : false;

/** The parsed values of `O`: an option without a default is undefined when neither flag nor variable sets it. */
export type OptionValues<O extends Options> = {
  -readonly [K in keyof O]: Always<O[K]> extends true ? ValueOf<O[K]> : ValueOf<O[K]> | undefined;
};

/** Where each value came from. */
export type Source = 'flag' | 'env' | 'default';

/** Declares options; `const` keeps each one's kind, so the parsed values are typed. */
export function defineOptions<const O extends Options>(options: O): O {
  return options;
}

/** How messages name an option: `--flag (VARIABLE)`, the flag or the variable alone when it has only one. */
export function optionName(flag: string, spec: OptionSpec): string {
  if (spec.envOnly) return spec.env ?? flag;
  return spec.env ? `--${flag} (${spec.env})` : `--${flag}`;
}

type Raw = string | boolean | string[] | undefined;

/**
 * Values of `options` from already-split flags (`raw`, as parseArgs gives them: strings, booleans,
 * string lists) and the environment: flag, else variable, else default. Throws one usage error
 * naming every option with a bad value.
 */
export function resolveOptions<O extends Options>(
  options: O,
  raw: Readonly<Record<string, Raw>>,
  env: Readonly<Record<string, string | undefined>> = process.env,
): { values: OptionValues<O>; from: Record<keyof O, Source> } {
  const values: Record<string, unknown> = {};
  const from: Record<string, Source> = {};
  const problems: string[] = [];
  for (const [flag, spec] of Object.entries(options)) {
    const given = spec.envOnly ? undefined : raw[flag];
    const fromEnv = spec.env ? env[spec.env] : undefined;
    const name = optionName(flag, spec);
    if (given !== undefined) {
      from[flag] = 'flag';
      if (typeof given === 'boolean' || Array.isArray(given)) values[flag] = given;
      else check(spec, given, name, problems, (v) => (values[flag] = v));
    } else if (fromEnv !== undefined && fromEnv !== '') {
      from[flag] = 'env';
      if (spec.kind === 'string' && spec.multiple) values[flag] = [fromEnv];
      else check(spec, fromEnv, name, problems, (v) => (values[flag] = v));
    } else {
      from[flag] = 'default';
      values[flag] = fallback(spec);
    }
  }
  if (problems.length) throw new RankwatchError('RANKWATCH_ERR_USAGE', problems.join('; '));
  return { values: values as OptionValues<O>, from: from as Record<keyof O, Source> };
}

function fallback(spec: OptionSpec): unknown {
  if (spec.kind === 'boolean') return false;
  if (spec.kind === 'list') return [...(spec.default ?? [])];
  if (spec.kind === 'string' && spec.multiple) return [];
  return spec.default;
}

const TRUE = new Set(['1', 'true', 'yes', 'on']);
const FALSE = new Set(['0', 'false', 'no', 'off']);

/** One value of one option, checked by its kind; `set` hears the parsed value, `problems` what is wrong. */
function check(
  spec: OptionSpec,
  text: string,
  name: string,
  problems: string[],
  set: (v: unknown) => void,
): void {
  const bad = (what: string) => problems.push(`${name} needs ${what}, got "${text}"`);
  switch (spec.kind) {
    case 'string':
      set(spec.multiple ? [text] : text);
      return;
    case 'file':
      if (text === '') bad('a path');
      else set(text);
      return;
    case 'boolean':
      // Only a variable gets here: a flag takes no value.
      if (TRUE.has(text.toLowerCase())) set(true);
      else if (FALSE.has(text.toLowerCase())) set(false);
      else bad('1 or 0 (true or false)');
      return;
    case 'number': {
      const why = numberProblem(text, spec);
      if (why) bad(why);
      else set(Number(text));
      return;
    }
    case 'url':
      if (isHttpUrl(text)) set(text);
      else bad('an http(s) URL');
      return;
    case 'enum':
      if (spec.values.includes(text)) set(text);
      else problems.push(`${name} takes ${spec.values.join(', ')}, got "${text}"`);
      return;
    case 'list': {
      const items = text
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean);
      const wrong = items.find((i) =>
        spec.item === 'url' ? !isHttpUrl(i) : spec.item === 'host:port' ? !/^[^:\s/]+:\d+$/.test(i) : false,
      );
      if (items.length === 0) bad('at least one value');
      else if (wrong !== undefined)
        problems.push(
          `${name} needs a comma-separated list of ${spec.item === 'url' ? 'http(s) URLs' : 'host:port'}, got "${wrong}" in "${text}"`,
        );
      else set(items);
      return;
    }
  }
}

function isHttpUrl(text: string): boolean {
  try {
    const u = new URL(text);
    return u.protocol === 'http:' || u.protocol === 'https:';
  } catch {
    return false;
  }
}

/** Why `text` is not a number these rules take, or undefined when it is one. */
function numberProblem(text: string, r: NumRules): string | undefined {
  const n = text.trim() === '' ? Number.NaN : Number(text);
  const of = r.unit ? ` of ${r.unit}` : '';
  const min = r.min ?? 0;
  if (!Number.isFinite(n)) return `a number${of}`;
  if (r.integer && !Number.isInteger(n)) return `a whole number${of}`;
  if (r.exclusiveMin ? n <= min : n < min)
    return r.exclusiveMin ? `a number${of} above ${min}` : `a number${of} of at least ${min}`;
  if (r.max !== undefined && n > r.max) return `a number${of} of at most ${r.max}`;
  return undefined;
}

/**
 * The command line `argv` read against `options` (plus `-h/--help`), then resolved as
 * `resolveOptions` does. `positionals`: whether arguments other than flags are taken.
 */
export function parseOptions<O extends Options>(
  argv: string[],
  options: O,
  o: { positionals?: boolean; env?: Readonly<Record<string, string | undefined>> } = {},
): { values: OptionValues<O> & { help: boolean }; positionals: string[]; from: Record<keyof O, Source> } {
  const config: Record<string, { type: 'string' | 'boolean'; multiple?: boolean; short?: string }> = {
    help: { type: 'boolean', short: 'h' },
  };
  for (const [flag, spec] of Object.entries(options)) {
    if (spec.envOnly) continue;
    config[flag] = {
      type: spec.kind === 'boolean' ? 'boolean' : 'string',
      ...(spec.kind === 'string' && spec.multiple ? { multiple: true } : {}),
      ...(spec.short ? { short: spec.short } : {}),
    };
  }
  let parsed: { values: Record<string, Raw>; positionals: string[] };
  try {
    parsed = parseArgs({
      args: argv,
      options: config,
      allowPositionals: o.positionals ?? false,
      strict: true,
    }) as typeof parsed;
  } catch (err) {
    throw usageError(err as Error, argv);
  }
  const help = parsed.values.help === true;
  // --help answers even when another flag is wrong: it is how a person finds the right one.
  if (help) {
    const values = Object.fromEntries(Object.keys(options).map((k) => [k, undefined]));
    return {
      values: { ...values, help } as OptionValues<O> & { help: boolean },
      positionals: parsed.positionals,
      from: {} as Record<keyof O, Source>,
    };
  }
  const { values, from } = resolveOptions(options, parsed.values, o.env);
  return { values: { ...values, help }, positionals: parsed.positionals, from };
}

function usageError(err: Error, argv: string[]): RankwatchError {
  const message = err.message.split('\n')[0];
  // `--ranks -8`: parseArgs reads "-8" as a flag and calls the option ambiguous; say what it is.
  const ambiguous = /^Option '(-[^' ]+)[^']*' argument is ambiguous/.exec(message);
  if (ambiguous) {
    const at = argv.indexOf(ambiguous[1]);
    const given = at >= 0 ? argv[at + 1] : undefined;
    return new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `${ambiguous[1]} got "${given}", which reads as a flag; no rankwatch number is negative, ${ambiguous[1]}`,
    );
  }
  return new RankwatchError('RANKWATCH_ERR_USAGE', message);
}

/** An option a command needs in this use (others may not): its value, or a usage error naming it. */
export function required<T>(value: T | undefined, flag: string): T {
  if (value === undefined) throw new RankwatchError('RANKWATCH_ERR_USAGE', `--${flag} is required`);
  return value;
}

const HELP_COLUMN = 28;
const HELP_WIDTH = 104;

/** The --help lines of `options`, in declaration order: flag and placeholder, help, default, [VARIABLE]. */
export function optionsHelp(options: Options): string {
  return Object.entries(options)
    .map(([flag, spec]) => helpEntry(flag, spec))
    .join('\n');
}

function placeholder(spec: OptionSpec): string {
  if (spec.kind === 'boolean') return '';
  if (spec.arg) return ` ${spec.arg}`;
  if (spec.kind === 'enum') return ` ${spec.values.join('|')}`;
  return ` ${{ number: 'N', url: 'URL', file: 'FILE', list: 'LIST', string: 'S' }[spec.kind]}`;
}

/** The default as --help says it, or undefined when there is none to say. */
export function defaultWords(spec: OptionSpec): string | undefined {
  if (spec.defaultText !== undefined) return spec.defaultText;
  if (spec.kind === 'boolean') return undefined;
  const d = spec.default;
  if (d === undefined) return undefined;
  return Array.isArray(d) ? (d.length ? d.join(',') : undefined) : String(d);
}

function helpEntry(flag: string, spec: OptionSpec): string {
  const left = spec.envOnly
    ? `  ${spec.env}`
    : `  ${spec.short ? `-${spec.short}, ` : ''}--${flag}${placeholder(spec)}`;
  const d = defaultWords(spec);
  const twin = spec.env && !spec.envOnly ? ` [${spec.env}${spec.kind === 'boolean' ? '=1' : ''}]` : '';
  const text = `${spec.help}${d === undefined ? '' : ` (default ${d})`}${twin}`;
  const lines: string[] = [];
  let line = left.length + 2 > HELP_COLUMN ? `${left} ` : left.padEnd(HELP_COLUMN - 1);
  let empty = true;
  for (const word of text.split(' ')) {
    if (!empty && line.length + 1 + word.length > HELP_WIDTH) {
      lines.push(line);
      line = ' '.repeat(HELP_COLUMN - 1);
      empty = true;
    }
    line += ` ${word}`;
    empty = false;
  }
  lines.push(line);
  return lines.join('\n');
}

export interface Command {
  name: string;
  usage: string;
  /** Every option the command takes, as parseOptions reads them (and --help lists them). */
  options: Options;
  run(argv: string[]): Promise<number>;
}
