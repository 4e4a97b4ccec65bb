/**
 * Tokens rotate without a restart, on the built CLI as an operator runs it: `rankwatch up --auth
 * FILE` warns at start that the file (mode 644, tokens in it) is readable by every user; a SIGHUP
 * re-reads the file and no longer stops the process; a file renamed over the old one is taken
 * without a signal; a broken file keeps the tokens in force and the log says why. `rankwatch serve`
 * takes SIGHUP the same way. Every request is a log line naming the token, and a client that
 * dribbles its headers (no token needed) is cut off.
 */
import { chmodSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Running, startRankwatch, until } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-up-auth-'));
const authFile = join(dir, 'auth.json');
const OLD = 'old-ci-token-0123456789';
const NEW = 'new-ci-token-0123456789';
const tokens = (...ts: [string, string][]) =>
  JSON.stringify({ tokens: ts.map(([name, token]) => ({ name, token, scopes: ['read', 'ingest'] })) });
/** As editors and secret managers write it: a new file renamed over the old. */
const replace = (text: string) => {
  writeFileSync(`${authFile}.tmp`, text, { mode: 0o644 });
  renameSync(`${authFile}.tmp`, authFile);
};
writeFileSync(authFile, tokens(['ci', OLD]));
chmodSync(authFile, 0o644);

const running: Running[] = [];
afterAll(() => {
  for (const r of running) r.kill();
  rmSync(dir, { recursive: true, force: true });
});

/** Writes a request line and then one header byte every 200 ms; resolves with what came back once the server closes. */
function dribbleHeaders(url: string): { closed: Promise<string>; stop(): void } {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  let got = '';
  let timer: NodeJS.Timeout | undefined;
  socket.on('connect', () => {
    socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    timer = setInterval(() => socket.writable && socket.write('a'), 200);
  });
  socket.on('data', (d) => {
    got += d.toString();
  });
  socket.on('error', () => {});
  const closed = new Promise<string>((r) =>
    socket.on('close', () => {
      clearInterval(timer);
      r(got);
    }),
  );
  return { closed, stop: () => socket.destroy() };
}

describe('rankwatch up --auth FILE', () => {
  let up: Running;
  let url = '';
  const status = async (token: string) =>
    (await fetch(`${url}/v1/jobs`, { headers: { authorization: `Bearer ${token}` } })).status;

  beforeAll(async () => {
    up = startRankwatch(['up', '--port', '0', '--data', join(dir, 'data'), '--auth', authFile]);
    running.push(up);
    url = await until('the listening line', () => /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1]);
  });

  it('warns at start that the file is readable by every user while it holds tokens', () => {
    expect(up.stderr()).toMatch(/WARN rankwatch up: auth: \S+ is readable by every user \(mode 0644\)/);
  });

  it('a client dribbling its headers is cut off (408) by the headers timeout', async () => {
    const slow = dribbleHeaders(url);
    try {
      // 15 s headers timeout, checked each second; generous for a loaded machine.
      const got = await Promise.race([
        slow.closed,
        new Promise<string>((r) => setTimeout(() => r('still open after 90 s'), 90_000)),
      ]);
      expect(got).toMatch(/^HTTP\/1\.1 408 /);
    } finally {
      slow.stop();
    }
  }, 120_000);

  it('SIGHUP re-reads the file and leaves up running; a request line names the token, never the token', async () => {
    expect(await status(OLD)).toBe(200);
    replace(tokens(['ci-2', NEW]));
    up.proc.kill('SIGHUP');
    await until('the re-read', () => (/re-read \(SIGHUP\)/.test(up.stderr()) ? true : undefined));
    expect(await status(NEW)).toBe(200);
    expect(await status(OLD)).toBe(401);
    expect(up.proc.exitCode).toBeNull();
    const line = await until('the request line', () =>
      up
        .stderr()
        .split('\n')
        .find((l) => l.includes('INFO rankwatch up: request ') && l.includes('token="ci-2"')),
    );
    expect(line).toMatch(/ method="GET" route="\/v1\/jobs" status=200 ms=[\d.]+ ip="127\.0\.0\.1"/);
    expect(line).toMatch(/ reqId="[\w-]+"/);
    expect(up.stderr()).not.toContain(NEW);
  });

  it('a changed file is taken without a signal; a broken one keeps the tokens in force and says why', async () => {
    replace(tokens(['ci', OLD]));
    await until('the old token back', async () => ((await status(OLD)) === 200 ? true : undefined));
    expect(up.stderr()).toMatch(/re-read \(change\): 1 token\(s\); added ci; removed ci-2/);
    replace('{"tokens": [');
    await until('the refusal', () =>
      /not re-read \(change\), keeping the 1 token\(s\) in force: .*is not JSON/.test(up.stderr())
        ? true
        : undefined,
    );
    expect(await status(OLD)).toBe(200);
    up.proc.kill('SIGHUP');
    await until('the refusal on SIGHUP', () =>
      /not re-read \(SIGHUP\)/.test(up.stderr()) ? true : undefined,
    );
    expect(await status(OLD)).toBe(200);
    expect(await up.stop('SIGTERM')).toBe(0);
  });
});

describe('rankwatch serve --auth FILE', () => {
  it('takes SIGHUP as a re-read, not a stop', async () => {
    replace(tokens(['reader', NEW]));
    const serve = startRankwatch([
      'serve',
      '--port',
      '0',
      '--data',
      join(dir, 'data'), // what up stored (serve reads a store; it creates none)
      '--auth',
      authFile,
    ]);
    running.push(serve);
    const url = await until(
      'the listening line',
      () => /listening on (http:\/\/\S+)/.exec(serve.stdout())?.[1],
    );
    serve.proc.kill('SIGHUP');
    await until('the re-read', () =>
      /re-read \(SIGHUP\): 1 token\(s\), unchanged/.test(serve.stderr()) ? true : undefined,
    );
    const r = await fetch(`${url}/v1/jobs`, { headers: { authorization: `Bearer ${NEW}` } });
    expect(r.status).toBe(200);
    expect(serve.proc.exitCode).toBeNull();
    expect(await serve.stop('SIGTERM')).toBe(0);
  });
});
