/**
 * Token rotation without a restart, on real files: the --auth file is re-read when it changes
 * (written in place, renamed over, deleted and put back) and by reload() (what SIGHUP calls); a
 * bad file keeps the tokens in force and the log says why; the modes that let other users read
 * or write tokens are warned about. Through a real app: the old token stops working, the new one
 * starts. tests/up-auth.int.test.ts sends the signal to the built CLI.
 */
import { chmodSync, mkdirSync, mkdtempSync, renameSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createLogger, type Logger } from '../core/log.js';
import { until } from '../tests/helpers.js';
import { buildApp } from './app.js';
import { exposure, WatchedAuthFile } from './auth-file.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-auth-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const OLD = 'old-token-0123456789abcdef';
const NEW = 'new-token-0123456789abcdef';
const entry = (name: string, token: string, scopes = ['read']) => ({ name, token, scopes });
let n = 0;

/** A fresh auth file (mode 600) and a log that keeps its JSON lines. */
function setup(tokens: object[]) {
  const path = join(dir, `auth-${++n}.json`);
  writeFileSync(path, JSON.stringify({ tokens }), { mode: 0o600 });
  const lines: { level: string; msg: string }[] = [];
  const log = createLogger('rankwatch test', { format: 'json', write: (l) => lines.push(JSON.parse(l)) });
  return { path, lines, log, said: () => lines.map((l) => `${l.level} ${l.msg}`).join('\n') };
}

/** Replaces the file the way editors and secret managers do: a new file renamed over it. */
function replace(path: string, text: string) {
  writeFileSync(`${path}.tmp`, text, { mode: 0o600 });
  renameSync(`${path}.tmp`, path);
}

const files: WatchedAuthFile[] = [];
afterEach(() => {
  for (const f of files.splice(0)) f.close();
});
const watch = (path: string, log: Logger) => {
  const f = new WatchedAuthFile(path, log, 50);
  files.push(f);
  return f;
};

describe('the --auth file, re-read while the server runs', () => {
  it('a changed file is in force within moments: the old token is refused, the new one taken', async () => {
    const { path, said, lines, log } = setup([
      entry('ci', OLD),
      entry('grafana', 'grafana-token-0123456789'),
    ]);
    const file = watch(path, log);
    const app = await buildApp({ auth: { tokens: file.current }, logger: log });
    app.get('/v1/probe', { config: { scope: 'read' } }, async () => ({ ok: true }));
    const status = async (token: string) =>
      (await app.inject({ method: 'GET', url: '/v1/probe', headers: { authorization: `Bearer ${token}` } }))
        .statusCode;
    try {
      expect(await status(OLD)).toBe(200);
      expect(await status(NEW)).toBe(401);
      replace(
        path,
        JSON.stringify({
          tokens: [entry('ci-2', NEW), entry('grafana', 'grafana-token-0123456789', ['read', 'admin'])],
        }),
      );
      await until(
        'the new token in force',
        async () => ((await status(NEW)) === 200 ? true : undefined),
        30_000,
      );
      expect(await status(OLD)).toBe(401);
      expect(said()).toMatch(/re-read \(change\): 2 token\(s\); added ci-2; removed ci; changed grafana/);
      // Names only: no token reaches the log.
      expect(JSON.stringify(lines)).not.toContain(NEW);
      // Written in place (not renamed over) is seen too.
      writeFileSync(path, JSON.stringify({ tokens: [entry('ci', OLD)] }));
      await until('the old token back', async () => ((await status(OLD)) === 200 ? true : undefined), 30_000);
    } finally {
      await app.close();
    }
  });

  it('a bad file keeps the tokens in force and says why; a good one after it is taken', async () => {
    const { path, said, log } = setup([entry('ci', OLD)]);
    const file = watch(path, log);
    const before = file.current();
    const bad: [string, RegExp][] = [
      ['{"tokens": [', /is not JSON/],
      [JSON.stringify({ tokens: [{ name: 'ci', token: 'short', scopes: ['read'] }] }), /tokens\/0\/token/],
      [JSON.stringify({ tokens: [entry('a', OLD), entry('a', NEW)] }), /"a" is used twice/],
      [JSON.stringify({ tokens: [] }), /lists no token, which would open every route/],
    ];
    for (const [text, why] of bad) {
      replace(path, text);
      expect(file.reload('SIGHUP')).toBe(false);
      expect(file.current()).toBe(before);
      expect(said()).toMatch(
        new RegExp(`not re-read \\(SIGHUP\\), keeping the 1 token\\(s\\) in force: .*${why.source}`),
      );
    }
    unlinkSync(path);
    await until('the missing file noticed', () => (/cannot read/.test(said()) ? true : undefined), 30_000);
    expect(file.current()).toBe(before);
    replace(path, JSON.stringify({ tokens: [entry('ci', NEW)] }));
    await until('the file back', () => (file.current() !== before ? true : undefined), 30_000);
    expect(said()).toMatch(/re-read \(change\): 1 token\(s\); changed ci/);
    // SIGHUP with nothing new still says so.
    expect(file.reload('SIGHUP')).toBe(true);
    expect(said()).toMatch(/re-read \(SIGHUP\): 1 token\(s\), unchanged/);
  });

  it('warns when others may read its tokens or anyone but its owner may write it', () => {
    const { path, said, lines, log } = setup([entry('ci', OLD)]);
    watch(path, log);
    expect(lines.filter((l) => l.level === 'warn')).toEqual([]);
    chmodSync(path, 0o644);
    expect(exposure(path, true)).toEqual([
      expect.stringMatching(/readable by every user \(mode 0644\).*chmod 600/),
    ]);
    // Digests only: reading them gives no usable token.
    expect(exposure(path, false)).toEqual([]);
    // A group that may read is a choice; one that may write can mint an admin token.
    chmodSync(path, 0o640);
    expect(exposure(path, true)).toEqual([]);
    chmodSync(path, 0o620);
    expect(exposure(path, true)).toEqual([
      expect.stringMatching(/writable by users other than its owner \(mode 0620\)/),
    ]);
    chmodSync(path, 0o666);
    expect(exposure(path, true)).toHaveLength(2);
    // At start, through the log.
    watch(path, log);
    expect(said()).toMatch(/warn auth: .* is readable by every user/);
    expect(said()).toMatch(/warn auth: .* is writable by users other than its owner/);
    // A folder others may write lets them swap the file, unless it is sticky (as /tmp is).
    const open = join(dir, 'open');
    mkdirSync(open);
    chmodSync(open, 0o777);
    const inOpen = join(open, 'auth.json');
    writeFileSync(inOpen, '{}', { mode: 0o600 });
    expect(exposure(inOpen, true)).toEqual([
      expect.stringMatching(/in a folder users other than its owner may write/),
    ]);
    chmodSync(open, 0o1777);
    expect(exposure(inOpen, true)).toEqual([]);
  });
});
