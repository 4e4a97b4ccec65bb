/**
 * Every option of every command, from its declaration: a flag and its environment variable give
 * the same value and the same refusal, the flag wins over the variable, no code reads a declared
 * variable behind the parser's back, the variables that exist keep existing, --help lists every
 * option, and the table of variables in docs/operations.md is the one the declarations make.
 * Table-driven over the declarations, so an option added to any command is covered without a new
 * test.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import { type Command, type OptionSpec, parseOptions, resolveOptions } from './args.js';
import { COMMANDS } from './command-list.js';
import { withVariablesTable } from './options-doc.js';
import { PROCESS_OPTIONS } from './process-options.js';

const ROOT = join(import.meta.dirname, '..');

/** Every command's module, loaded as `rankwatch CMD` loads it. */
const commands: Command[] = await Promise.all(COMMANDS.map((c) => c.load()));

interface Twin {
  command: string;
  flag: string;
  spec: OptionSpec & { env: string };
  options: Command['options'];
}

const twins: Twin[] = commands.flatMap((c) =>
  Object.entries(c.options).flatMap(([flag, spec]) =>
    spec.env && !spec.envOnly
      ? [{ command: c.name, flag, spec: spec as Twin['spec'], options: c.options }]
      : [],
  ),
);

/** A value the option takes that is not its default (the declaration's example where the kind cannot make one). */
function goodValue(flag: string, spec: OptionSpec): string {
  if (spec.example !== undefined) return spec.example;
  switch (spec.kind) {
    case 'number': {
      const min = spec.min ?? 0;
      let n = spec.integer ? Math.floor(min) + 2 : min + 1.5;
      if (spec.max !== undefined) n = Math.min(n, spec.max);
      if (n === spec.default) n += spec.integer ? 1 : 0.25;
      return String(n);
    }
    case 'url':
      return 'http://127.0.0.1:9/twin';
    case 'list':
      return spec.item === 'url'
        ? 'http://127.0.0.1:9/a, http://127.0.0.1:9/b'
        : spec.item === 'host:port'
          ? 'k1:9092,k2:9093'
          : 'a,b';
    case 'enum':
      return spec.values.find((v) => v !== spec.default) ?? spec.values[0];
    case 'file':
      return `/tmp/twin-${flag}`;
    case 'string':
      return `twin-${flag}`;
    case 'boolean':
      return '1';
  }
}

/** Values the option must refuse; none for kinds that take any text. */
function badValues(spec: OptionSpec): string[] {
  switch (spec.kind) {
    case 'number':
      return ['lots', String((spec.min ?? 0) - 1), ...(spec.max !== undefined ? [String(spec.max + 1)] : [])];
    case 'url':
      return ['ch.internal:8123'];
    case 'list':
      return spec.item === 'url'
        ? ['http://127.0.0.1:9/a,am:9093']
        : spec.item === 'host:port'
          ? ['k1:9092,k2']
          : [];
    case 'enum':
      return ['bogus'];
    default:
      return [];
  }
}

/** The value `rankwatch CMD` parses for this option from `argv` and `env`, or the refusal. */
function parsed(t: Twin, argv: string[], env: Record<string, string>): unknown {
  try {
    return parseOptions(argv, t.options, { env, positionals: true }).values[t.flag];
  } catch (err) {
    if (!(err instanceof RankwatchError)) throw err;
    return { refused: err.code, message: err.message };
  }
}

describe('a flag and its environment variable', () => {
  it('there are twins to check in every command that has them', () => {
    const withTwins = new Set(twins.map((t) => t.command));
    expect([...withTwins].sort()).toEqual(
      [
        'checkpoint',
        'collect',
        'detect',
        'failures',
        'findings',
        'jobs',
        'replay',
        'report',
        'serve',
        'up',
      ].sort(),
    );
    expect(twins.length).toBeGreaterThan(100);
  });

  it.each(twins.map((t) => [`${t.command} --${t.flag} / ${t.spec.env}`, t] as const))(
    '%s: the same value either way, and the flag wins',
    (_, t) => {
      const v = goodValue(t.flag, t.spec);
      const byFlag = parsed(t, t.spec.kind === 'boolean' ? [`--${t.flag}`] : [`--${t.flag}=${v}`], {});
      const byEnv = parsed(t, [], { [t.spec.env]: v });
      const unset = parsed(t, [], {});
      expect(byFlag).not.toHaveProperty('refused');
      expect(byEnv).toEqual(byFlag);
      // Not the default: the value came through the variable, not around it.
      expect(byEnv).not.toEqual(unset);
      if (t.spec.kind === 'boolean') {
        expect(parsed(t, [], { [t.spec.env]: '0' })).toEqual(unset);
      } else {
        // The flag wins over its variable; an empty variable counts as unset.
        const other = parsed(t, [], { [t.spec.env]: badValues(t.spec)[0] ?? 'other' });
        expect(parsed(t, [`--${t.flag}=${v}`], { [t.spec.env]: badValues(t.spec)[0] ?? 'other' })).toEqual(
          byFlag,
        );
        expect(other).not.toEqual(byFlag);
      }
      expect(parsed(t, [], { [t.spec.env]: '' })).toEqual(unset);
    },
  );

  it.each(twins.map((t) => [`${t.command} --${t.flag} / ${t.spec.env}`, t] as const))(
    '%s: the same refusal either way, naming both',
    (_, t) => {
      const bad = t.spec.kind === 'boolean' ? [] : badValues(t.spec);
      for (const b of bad) {
        const byFlag = parsed(t, [`--${t.flag}=${b}`], {});
        const byEnv = parsed(t, [], { [t.spec.env]: b });
        expect(byFlag).toMatchObject({ refused: 'RANKWATCH_ERR_USAGE' });
        expect(byEnv).toEqual(byFlag);
        expect((byFlag as { message: string }).message).toContain(`--${t.flag} (${t.spec.env})`);
      }
      if (t.spec.kind === 'boolean')
        expect(parsed(t, [], { [t.spec.env]: 'maybe' })).toEqual({
          refused: 'RANKWATCH_ERR_USAGE',
          message: `--${t.flag} (${t.spec.env}) needs 1 or 0 (true or false), got "maybe"`,
        });
    },
  );

  it('each variable is named for its flag, so none is wired to the wrong option', () => {
    // RANKWATCH_[KAFKA_]FLAG or CLICKHOUSE_FLAG (less its clickhouse- prefix); the two older names kept as they were.
    const kept: Record<string, string> = {
      auth: 'RANKWATCH_AUTH_FILE',
      'clickhouse-ca': 'CLICKHOUSE_CA_CERT',
    };
    const wrong = twins.filter(({ flag, spec }) => {
      if (kept[flag]) return spec.env !== kept[flag];
      const name = spec.env
        .replace(/^(RANKWATCH_KAFKA_|RANKWATCH_|CLICKHOUSE_)/, '')
        .toLowerCase()
        .replaceAll('_', '-');
      return name !== flag && name !== flag.replace(/^clickhouse-/, '');
    });
    expect(wrong.map((t) => `${t.command} --${t.flag}: ${t.spec.env}`)).toEqual([]);
  });

  it('a variable means one option in every command that reads it', () => {
    const flagOf = new Map<string, string>();
    const clashes: string[] = [];
    for (const c of [...commands, { name: 'every command', options: PROCESS_OPTIONS }])
      for (const [flag, spec] of Object.entries(c.options)) {
        if (!spec.env) continue;
        const seen = flagOf.get(spec.env);
        if (seen !== undefined && seen !== flag)
          clashes.push(`${spec.env}: --${seen} and --${flag} (${c.name})`);
        flagOf.set(spec.env, flag);
      }
    expect(clashes).toEqual([]);
  });
});

describe('the variables', () => {
  const declared = new Set(
    [...commands.map((c) => c.options), PROCESS_OPTIONS].flatMap((o) =>
      Object.values(o).flatMap((s) => (s.env ? [s.env] : [])),
    ),
  );

  it('every variable rankwatch has read keeps working', () => {
    const kept = [
      'RANKWATCH_STORE',
      'RANKWATCH_DATA',
      'RANKWATCH_MIN_FREE_MB',
      'CLICKHOUSE_URL',
      'CLICKHOUSE_USER',
      'CLICKHOUSE_PASSWORD',
      'CLICKHOUSE_DATABASE',
      'CLICKHOUSE_CA_CERT',
      'CLICKHOUSE_CERT',
      'CLICKHOUSE_KEY',
      'CLICKHOUSE_ASYNC_INSERT',
      'RANKWATCH_RAW_TTL_DAYS',
      'RANKWATCH_ROLLUP_TTL_DAYS',
      'RANKWATCH_ALERTMANAGER_URL',
      'RANKWATCH_ALERT_WEBHOOK',
      'RANKWATCH_ALERT_WEBHOOK_SECRET',
      'RANKWATCH_ALERT_LINK_BASE',
      'RANKWATCH_ALERT_ROUTES',
      'RANKWATCH_CORDON_DRIVER',
      'RANKWATCH_KUBE_TOKEN',
      'RANKWATCH_KAFKA_BROKERS',
      'RANKWATCH_KAFKA_CLIENT_ID',
      'RANKWATCH_KAFKA_TOPIC',
      'RANKWATCH_KAFKA_DEAD_LETTER_TOPIC',
      'RANKWATCH_KAFKA_GROUP',
      'RANKWATCH_KAFKA_PARTITIONS',
      'RANKWATCH_KAFKA_REPLICATION_FACTOR',
      'RANKWATCH_KAFKA_COMPRESSION',
      'RANKWATCH_KAFKA_TLS',
      'RANKWATCH_KAFKA_TLS_CA',
      'RANKWATCH_KAFKA_TLS_CERT',
      'RANKWATCH_KAFKA_TLS_KEY',
      'RANKWATCH_KAFKA_SASL_MECHANISM',
      'RANKWATCH_KAFKA_SASL_USERNAME',
      'RANKWATCH_KAFKA_SASL_PASSWORD',
      'RANKWATCH_KAFKA_SESSION_TIMEOUT_MS',
      'RANKWATCH_TOKEN',
      'RANKWATCH_AUTH_FILE',
      'RANKWATCH_API',
      'RANKWATCH_LOG_LEVEL',
      'RANKWATCH_LOG_FORMAT',
      'RANKWATCH_DEBUG',
      'RANKWATCH_HEAP_GROWING_PERCENT',
    ];
    expect(kept.filter((v) => !declared.has(v))).toEqual([]);
  });

  it('no product code reads a declared variable itself: the parser is the one reader', () => {
    const readers: string[] = [];
    const walk = (dir: string) => {
      for (const name of readdirSync(dir)) {
        const path = join(dir, name);
        if (statSync(path).isDirectory()) walk(path);
        else if (name.endsWith('.ts') && !name.endsWith('.test.ts')) {
          const text = readFileSync(path, 'utf8');
          // process.env.X, env.X, env['X'], and names built in a template (env[`RANKWATCH_…${…}`]).
          for (const m of text.matchAll(/\benv(?:\.([A-Z][A-Z0-9_]*)|\[\s*['"`]([A-Z][A-Z0-9_]*))/g)) {
            const v = m[1] ?? m[2];
            if (declared.has(v) || /^(RANKWATCH|CLICKHOUSE)_/.test(v))
              readers.push(`${relative(ROOT, path)}: ${m[0]}`);
          }
        }
      }
    };
    const product = ['core', 'cli', 'api', 'store', 'stream', 'collectors', 'alerts', 'actions', 'pipeline'];
    for (const d of [...product, 'detectors', 'sim', 'eval', 'mfu', 'analytics', 'schema'])
      walk(join(ROOT, d));
    expect(readers).toEqual([]);
  });
});

describe('--help and the docs come from the declarations', () => {
  it("every command's --help lists each of its options, and names no variable it does not declare", () => {
    for (const c of commands) {
      const missing = Object.entries(c.options)
        .filter(([flag, spec]) => !c.usage.includes(spec.envOnly ? String(spec.env) : `--${flag}`))
        .map(([flag]) => flag);
      expect({ command: c.name, missing }).toEqual({ command: c.name, missing: [] });
      const own = new Set(Object.values(c.options).flatMap((s) => (s.env ? [s.env] : [])));
      const named = [...c.usage.matchAll(/\[([A-Z][A-Z0-9_]+)(?:=1)?\]/g)].map((m) => m[1]);
      expect({ command: c.name, stray: named.filter((v) => !own.has(v)) }).toEqual({
        command: c.name,
        stray: [],
      });
    }
  });

  it('docs/operations.md has the table of variables the declarations make', async () => {
    const file = join(ROOT, 'docs', 'operations.md');
    const doc = readFileSync(file, 'utf8');
    // When this fails: node --import tsx scripts/options-doc.ts
    expect(doc).toBe(await withVariablesTable(doc));
  });
});

describe('the process options', () => {
  it('refuse a bad value in one line naming the variable', () => {
    expect(() => resolveOptions(PROCESS_OPTIONS, {}, { RANKWATCH_HEAP_GROWING_PERCENT: '1.5' })).toThrow(
      'RANKWATCH_HEAP_GROWING_PERCENT needs a whole number, got "1.5"',
    );
    expect(() =>
      resolveOptions(PROCESS_OPTIONS, {}, { RANKWATCH_LOG_LEVEL: 'loud', RANKWATCH_LOG_FORMAT: 'xml' }),
    ).toThrow(
      'RANKWATCH_LOG_LEVEL takes trace, debug, info, warn, error, fatal, silent, got "loud"; RANKWATCH_LOG_FORMAT takes text, json, got "xml"',
    );
  });
});

beforeAll(() => {
  expect(commands.map((c) => c.name)).toEqual(COMMANDS.map((c) => c.name));
});
