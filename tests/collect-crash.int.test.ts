/**
 * What `rankwatch collect` acknowledged survives its crash: with --spool and the bus away, a
 * training hook's batches posted to the collector's local port are answered 200 once they are on
 * the spool; the collector is SIGKILLed, a new one on the same spool delivers every event to
 * `rankwatch up` once it is reachable. The built CLI, real HTTP, chDB.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startUp, type Up } from '../api/up.js';
import { ChdbStore } from '../store/chdb.js';
import { postLines, type Running, simLines, startRankwatch, until } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-collect-crash-'));
const running: Running[] = [];
let up: Up | undefined;
afterAll(async () => {
  for (const r of running) r.kill();
  await up?.close();
  rmSync(dir, { recursive: true, force: true });
});

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });

const collect = async (bus: string) => {
  const c = startRankwatch([
    'collect',
    '--bus',
    bus,
    '--host',
    'n1',
    '--spool',
    join(dir, 'spool'),
    '--health-port',
    '0',
    '--flush-ms',
    '2000',
  ]);
  running.push(c);
  const url = await until('the health port', () => /health on (http:\/\/\S+)\/healthz/.exec(c.stderr())?.[1]);
  return { c, url };
};

describe('rankwatch collect --spool, SIGKILLed while the bus is away', () => {
  it('delivers every event it answered 200 for, after a restart, once the bus is back', async () => {
    const port = await freePort();
    const first = await collect(`http://127.0.0.1:${port}`);
    const lines = simLines('--ranks', '8', '--steps', '50', '--seed', '4', '--job', 'spooljob');
    const half = lines.length >> 1;
    expect(new Set(await postLines(first.url, lines.slice(0, half), {}, 500))).toEqual(new Set([200]));
    await until('/healthz to say the bus is failing', async () =>
      (await fetch(`${first.url}/healthz`)).status === 503 ? true : undefined,
    );
    const health = (await (await fetch(`${first.url}/healthz`)).json()) as {
      checks: { bus: { reason: string } };
    };
    expect(health.checks.bus.reason).toMatch(/unreachable.*kept and retried/);
    // Killed the moment the last 200 arrives, well before a flush (--flush-ms 2000) could run.
    expect(new Set(await postLines(first.url, lines.slice(half), {}, 500))).toEqual(new Set([200]));
    first.c.proc.kill('SIGKILL');
    await new Promise((r) => first.c.proc.once('exit', r));

    up = await startUp({ host: '127.0.0.1', port: 0, store: new ChdbStore({ path: join(dir, 'data') }) });
    const second = await collect(up.url);
    const count = async () =>
      Number((await up!.store.query<{ n: string }>('SELECT count() AS n FROM events FINAL'))[0].n);
    await until(
      'every event stored',
      async () => ((await count()) === lines.length ? true : undefined),
      120_000,
    );
    expect(await second.c.stop()).toBe(0);
  }, 240_000);
});
