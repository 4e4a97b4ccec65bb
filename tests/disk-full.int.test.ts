/**
 * A filling disk under the journals, then kill -9: every event that was acknowledged is stored
 * after the restart, once, and nothing that was refused. The write-ahead log of `rankwatch up`
 * (HTTP ingest answered 200) and the spool of `rankwatch collect` (its local ingest, as a training
 * hook posts, answered 200) each sit on a small tmpfs that the test fills while requests come in,
 * so appends fail part way (short writes); then it gives back a little room (still short), so
 * appends succeed right after failed ones, kills the process with SIGKILL, frees the disk and
 * restarts. The built CLI, real HTTP, a real filesystem, chDB. Needs root (mount); skipped without.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startUp, type Up } from '../api/up.js';
import { Disk } from '../soak/disk.js';
import { freePort } from '../soak/procs.js';
import { ChdbStore } from '../store/chdb.js';
import { type Running, startRankwatch, until } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-disk-full-'));
const walDisk = new Disk(dir, 'wal-disk');
const dataDisk = new Disk(dir, 'data-disk');
const spoolDisk = new Disk(dir, 'spool-disk');
const mounted = (await walDisk.mount(8)) && (await dataDisk.mount(96)) && (await spoolDisk.mount(8));
const running: Running[] = [];
let inProcess: Up | undefined;
afterAll(async () => {
  for (const r of running) r.kill();
  await inProcess?.close();
  await walDisk.unmount();
  await dataDisk.unmount();
  await spoolDisk.unmount();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * Request `r`: 2,000 step events of one job, written as Python's json.dumps writes them (spaces
 * after separators), so a replay that stored them as re-encoded text would show as doubles.
 */
function request(job: string, r: number): string[] {
  return Array.from({ length: 2000 }, (_, k) =>
    JSON.stringify({
      v: 1,
      kind: 'step',
      ts: Date.now() - 3_600_000 + r * 2000 + k,
      job,
      rank: k % 16,
      host: `node-${k % 16}`,
      gpu: k % 8,
      step: r * 1000 + Math.floor(k / 16),
      step_ms: 1000.5,
      compute_ms: 800.25,
      tokens: 4096,
    })
      .replaceAll(',"', ', "')
      .replaceAll('":', '": '),
  );
}

async function post(url: string, lines: string[]): Promise<number> {
  const res = await fetch(`${url}/v1/ingest`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-ndjson' },
    body: `${lines.join('\n')}\n`,
  });
  await res.arrayBuffer();
  return res.status;
}

/** Posts requests until one is refused (at most `max`); returns the lines of those answered 200. */
async function postUntilRefused(url: string, job: string, from: number, max = 40) {
  const acked: string[] = [];
  const refused: number[] = [];
  for (let r = from; r < from + max && refused.length === 0; r++) {
    const lines = request(job, r);
    const status = await post(url, lines);
    if (status === 200) acked.push(...lines);
    else refused.push(status);
  }
  return { acked, refused, next: from + max };
}

const health = async (url: string) => {
  const res = await fetch(`${url}/healthz`);
  return { status: res.status, body: (await res.json()) as { checks: Record<string, { reason?: string }> } };
};

/** Every stored raw event (FINAL: what every reader sees) of `job`. */
async function storedRaw(store: ChdbStore, job: string): Promise<string[]> {
  const rows = await store.query<{ raw: string }>('SELECT raw FROM events FINAL WHERE job = {job:String}', {
    job,
  });
  return rows.map((r) => r.raw);
}

/**
 * Fills `disk` while requests come in until one is refused (its health check `check` failing with
 * the disk's reason), gives back a little room (still short) and posts until the next refusal, then
 * kills `proc` with SIGKILL. Returns the lines acknowledged, in both rounds.
 */
async function fillFreeKill(o: { url: string; job: string; disk: Disk; check: string; proc: Running }) {
  o.disk.fill(2.5);
  const a = await postUntilRefused(o.url, o.job, 0);
  expect(a.acked.length).toBeGreaterThan(0);
  expect(a.refused[0]).toBeGreaterThanOrEqual(500);
  const h = await health(o.url);
  expect(h.status).toBe(503);
  expect(h.body.checks[o.check].reason).toMatch(/no space left|ENOSPC/i);
  // A little room, still short: appends right after the failed one succeed, then fail again.
  o.disk.freeSome(1 << 20);
  const b = await postUntilRefused(o.url, o.job, a.next);
  expect(b.acked.length).toBeGreaterThan(0);
  expect(b.refused.length).toBe(1);
  o.proc.proc.kill('SIGKILL');
  await new Promise((r) => o.proc.proc.once('exit', r));
  o.disk.free();
  return [...a.acked, ...b.acked];
}

describe.skipIf(!mounted)('a disk that fills under the journals, then kill -9', () => {
  it('rankwatch up: every event answered 200 is stored after the restart, once; none that was refused', async () => {
    const data = join(dataDisk.dir, 'data');
    const wal = join(walDisk.dir, 'wal');
    const startUpCli = async () => {
      const up = startRankwatch(['up', '--port', '0', '--data', data, '--wal', wal, '--min-free-mb', '32']);
      running.push(up);
      const url = await until(
        'the listening line',
        () => /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1],
      );
      return { up, url };
    };
    // The store's disk under its free-space floor: the store takes nothing (held and retried), so
    // what is acknowledged is only in the log.
    const first = await startUpCli();
    dataDisk.fill(8);
    const acked = await fillFreeKill({
      url: first.url,
      job: 'walfull',
      disk: walDisk,
      check: 'wal',
      proc: first.up,
    });
    dataDisk.free();
    const second = await startUpCli();
    console.log(/\d+ event\(s\) in \d+ batch\(es\) left in[^\n]*/.exec(second.up.stderr())?.[0]);
    // The replay is queued before the port opens; a clean stop drains it into the store.
    expect(await second.up.stop('SIGTERM')).toBe(0);
    const store = new ChdbStore({ path: data });
    try {
      const raw = await storedRaw(store, 'walfull');
      expect(raw.length).toBe(acked.length); // none lost, none doubled
      expect(new Set(raw)).toEqual(new Set(acked)); // and none of the refused ones
    } finally {
      await store.close();
    }
  }, 300_000);

  it('rankwatch collect --spool: every event answered 200 on its local port reaches the store after the restart, once', async () => {
    const spool = join(spoolDisk.dir, 'spool');
    const collect = async (bus: string) => {
      const c = startRankwatch([
        ...['collect', '--bus', bus, '--host', 'n1', '--spool', spool],
        ...['--health-port', '0', '--flush-ms', '500'],
      ]);
      running.push(c);
      const url = await until(
        'the health port',
        () => /health on (http:\/\/\S+)\/healthz/.exec(c.stderr())?.[1],
      );
      return { c, url };
    };
    // The bus is away: what the collector acknowledges is only in its spool.
    const first = await collect(`http://127.0.0.1:${await freePort()}`);
    const acked = await fillFreeKill({
      url: first.url,
      job: 'spoolfull',
      disk: spoolDisk,
      check: 'spool',
      proc: first.c,
    });
    inProcess = await startUp({
      host: '127.0.0.1',
      port: 0,
      store: new ChdbStore({ path: join(dir, 'collect-data') }),
    });
    const second = await collect(inProcess.url);
    const store = inProcess.store as ChdbStore;
    await until(
      'every acknowledged event stored',
      async () => ((await storedRaw(store, 'spoolfull')).length >= acked.length ? true : undefined),
      120_000,
    );
    expect(await second.c.stop()).toBe(0);
    await inProcess.pipeline.drain();
    // The collector sends events re-encoded: compared as events, not as text.
    const key = (text: string) => {
      const e = JSON.parse(text) as { rank: number; step: number };
      return `${e.rank}/${e.step}`;
    };
    const stored = (await storedRaw(store, 'spoolfull')).map(key);
    expect(stored.length).toBe(acked.length);
    expect(new Set(stored)).toEqual(new Set(acked.map(key)));
  }, 300_000);
});
