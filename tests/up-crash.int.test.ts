/**
 * What `rankwatch up` acknowledged survives its crash: the built CLI takes a simulated job over
 * HTTP, is SIGKILLed the moment the last 2xx arrives (the pipeline still has most of it queued),
 * and a second `up` on the same data folder replays its write-ahead log before it listens. Every
 * event is then in chDB exactly once (read with FINAL, as every reader does).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { postLines, type Running, simLines, startRankwatch, until } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-up-crash-'));
const data = join(dir, 'data');
const running: Running[] = [];

const startUp = async () => {
  const up = startRankwatch(['up', '--port', '0', '--data', data]);
  running.push(up);
  const url = await until('the listening line', () => /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1]);
  return { up, url };
};

describe('rankwatch up, SIGKILLed right after it acknowledged', () => {
  afterAll(() => {
    for (const r of running) r.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps every acknowledged event: the next start replays its log, each event stored once', async () => {
    const lines = simLines('--ranks', '32', '--steps', '300', '--seed', '11', '--job', 'crashjob');
    const first = await startUp();
    const statuses = await postLines(first.url, lines, {}, 5000);
    expect(new Set(statuses)).toEqual(new Set([200]));
    first.up.proc.kill('SIGKILL');
    await new Promise((r) => first.up.proc.once('exit', r));

    const second = await startUp();
    // Only the log brings back what the first process had not stored when it was killed.
    console.log(/replaying \d+ event\(s\)[^\n]*/.exec(second.up.stderr())?.[0] ?? 'nothing to replay');
    // The replay is queued before the port opens; a clean stop drains it into the store.
    expect(await second.up.stop('SIGTERM')).toBe(0);

    const { ChdbStore } = await import('../store/chdb.js');
    const store = new ChdbStore({ path: data });
    try {
      const [row] = await store.query<{ n: string }>('SELECT count() AS n FROM raw_events');
      expect(Number(row.n)).toBe(lines.length);
      const [dup] = await store.query<{ n: string }>(
        'SELECT count() AS n FROM (SELECT raw, count() AS c FROM raw_events GROUP BY raw HAVING c > 1)',
      );
      expect(Number(dup.n)).toBe(0);
    } finally {
      await store.close();
    }
  }, 300_000);
});
