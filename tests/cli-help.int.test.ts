/**
 * `rankwatch CMD --help` prints its usage without loading what the command runs: the HTTP server,
 * the ClickHouse engine and the Kafka client cost ~0.6 s of startup between them. A module hook
 * in the child fails the process the moment one of them is resolved.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const bin = join(import.meta.dirname, '..', 'bin', 'rankwatch.js');
const HEAVY = ['fastify', 'chdb', 'kafkajs'];

const hook = `export async function resolve(s, c, next) {
  if (${JSON.stringify(HEAVY)}.includes(s)) throw new Error('--help loaded ' + s);
  return next(s, c);
}`;
const register = `import { register } from 'node:module';
register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}));`;
const guarded = ['--import', `data:text/javascript,${encodeURIComponent(register)}`];

async function rankwatch(...args: string[]) {
  try {
    const r = await run(process.execPath, [...guarded, bin, ...args]);
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe('--help loads no server, engine or Kafka client', () => {
  let commands: string[] = [];
  beforeAll(async () => {
    // The command list as `rankwatch --help` prints it: "  name  summary" under "Commands:".
    const r = await rankwatch('--help');
    const list = r.stdout.split('Commands:\n')[1]?.split('\n\n')[0] ?? '';
    commands = list.split('\n').map((l) => l.trim().split(/\s+/)[0]);
  });

  it('every command', async () => {
    expect(commands).toEqual(expect.arrayContaining(['up', 'detect', 'serve', 'demo', 'replay', 'collect']));
    for (const name of commands) {
      const r = await rankwatch(name, '--help');
      expect({ name, stderr: r.stderr, code: r.code }).toEqual({ name, stderr: '', code: 0 });
      expect(r.stdout).toContain(`rankwatch ${name}`);
    }
  }, 120_000);

  it('the guard itself trips when a command does load one of them', async () => {
    const r = await rankwatch('serve', '--port', '0', '--data', join(import.meta.dirname, 'no-such-dir'));
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/--help loaded (fastify|chdb)/);
  });
});
