/**
 * The option parser on declarations of each kind: flag over variable over default, every problem
 * in one line, --help answered whatever else is wrong, and the --help lines it writes.
 */
import { describe, expect, it } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import { defineOptions, optionsHelp, parseOptions } from './args.js';

const OPTIONS = defineOptions({
  port: { kind: 'number', integer: true, max: 65_535, default: 7070, help: 'port' },
  rate: { kind: 'number', env: 'X_RATE', exclusiveMin: true, unit: 'requests', help: 'rate' },
  hooks: { kind: 'list', item: 'url', env: 'X_HOOKS', help: 'receivers' },
  store: { kind: 'enum', values: ['chdb', 'clickhouse'], env: 'X_STORE', help: 'where' },
  tls: { kind: 'boolean', env: 'X_TLS', help: 'with TLS' },
  fault: { kind: 'string', multiple: true, arg: 'SPEC', help: 'repeatable' },
  secret: { kind: 'string', env: 'X_SECRET', envOnly: true, help: 'environment only' },
});

function refusal(fn: () => unknown): { code: string; message: string } {
  try {
    fn();
  } catch (err) {
    if (err instanceof RankwatchError) return { code: err.code, message: err.message };
    throw err;
  }
  throw new Error('not refused');
}

describe('parseOptions', () => {
  it('takes the flag, else the variable, else the default, and says which', () => {
    const none = parseOptions([], OPTIONS, { env: {} });
    expect(none.values).toMatchObject({ port: 7070, rate: undefined, hooks: [], tls: false, fault: [] });
    expect(none.from).toMatchObject({ port: 'default', rate: 'default' });
    const env = { X_RATE: '2.5', X_HOOKS: 'http://a:1/x, http://b:2/y', X_TLS: 'true', X_SECRET: 's' };
    const byEnv = parseOptions([], OPTIONS, { env });
    expect(byEnv.values).toMatchObject({
      rate: 2.5,
      hooks: ['http://a:1/x', 'http://b:2/y'],
      tls: true,
      secret: 's',
    });
    expect(byEnv.from).toMatchObject({ rate: 'env', hooks: 'env' });
    const byFlag = parseOptions(
      ['--rate', '7', '--hooks', 'http://c:3/z', '--fault', 'a', '--fault', 'b'],
      OPTIONS,
      {
        env,
      },
    );
    expect(byFlag.values).toMatchObject({ rate: 7, hooks: ['http://c:3/z'], fault: ['a', 'b'] });
    expect(byFlag.from).toMatchObject({ rate: 'flag', hooks: 'flag' });
    // An empty variable is unset; a variable-only option has no flag.
    expect(parseOptions([], OPTIONS, { env: { X_RATE: '' } }).values.rate).toBeUndefined();
    expect(refusal(() => parseOptions(['--secret', 'x'], OPTIONS, { env: {} })).message).toMatch(
      /Unknown option '--secret'/,
    );
  });

  it('reports every bad value at once, in one line naming flag and variable', () => {
    const r = refusal(() =>
      parseOptions(['--port', '70000', '--store', 'mysql'], OPTIONS, {
        env: { X_RATE: '0', X_HOOKS: 'http://a:1/x,am:9093', X_TLS: 'maybe', X_SECRET: 's' },
      }),
    );
    expect(r.code).toBe('RANKWATCH_ERR_USAGE');
    expect(r.message.split('\n')).toHaveLength(1);
    expect(r.message).toBe(
      [
        '--port needs a number of at most 65535, got "70000"',
        '--rate (X_RATE) needs a number of requests above 0, got "0"',
        '--hooks (X_HOOKS) needs a comma-separated list of http(s) URLs, got "am:9093" in "http://a:1/x,am:9093"',
        '--store (X_STORE) takes chdb, clickhouse, got "mysql"',
        '--tls (X_TLS) needs 1 or 0 (true or false), got "maybe"',
      ].join('; '),
    );
  });

  it('says what a negative number reads as, and answers --help whatever else is wrong', () => {
    expect(refusal(() => parseOptions(['--port', '-8'], OPTIONS, { env: {} })).message).toBe(
      '--port got "-8", which reads as a flag; no rankwatch number is negative, --port',
    );
    expect(refusal(() => parseOptions(['--port=1.5'], OPTIONS, { env: {} })).message).toBe(
      '--port needs a whole number, got "1.5"',
    );
    expect(parseOptions(['--port', 'x', '-h'], OPTIONS, { env: { X_RATE: 'bad' } }).values.help).toBe(true);
  });
});

describe('optionsHelp', () => {
  it('one entry per option: placeholder, help, default and variable, wrapped under the help column', () => {
    const help = optionsHelp(
      defineOptions({
        port: { kind: 'number', default: 7070, help: 'port' },
        store: {
          kind: 'enum',
          values: ['chdb', 'clickhouse'],
          env: 'X_STORE',
          defaultText: 'chdb',
          help: 'where',
        },
        tls: { kind: 'boolean', env: 'X_TLS', help: 'with TLS' },
        secret: { kind: 'string', env: 'X_SECRET', envOnly: true, help: 'environment only' },
        long: { kind: 'file', help: `${'word '.repeat(30)}end` },
      }),
    );
    const lines = help.split('\n');
    expect(lines.slice(0, 4)).toEqual([
      '  --port N                  port (default 7070)',
      '  --store chdb|clickhouse   where (default chdb) [X_STORE]',
      '  --tls                     with TLS [X_TLS=1]',
      '  X_SECRET                  environment only',
    ]);
    expect(lines[4]).toMatch(/^ {2}--long FILE {15}word/);
    expect(lines.slice(5).every((l) => /^ {28}\S/.test(l))).toBe(true);
    expect(lines.every((l) => l.length <= 104)).toBe(true);
  });
});
