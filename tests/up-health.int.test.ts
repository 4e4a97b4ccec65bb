/**
 * `rankwatch up`'s health is honest: while the store refuses writes, GET /healthz answers 503
 * naming the store and since when, /metrics shows the retries, and the log has one line when the
 * failure starts and one when it ends, not one per retry. Real HTTP, the real chDB engine behind a
 * switch that makes it unreachable (tests/helpers.ts SwitchableStore), events through ingest.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startUp } from '../api/up.js';
import { createLogger } from '../core/log.js';
import { ChdbStore } from '../store/chdb.js';
import { postLines, SwitchableStore, simLines, until } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-up-health-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('rankwatch up health', () => {
  it('is 503 with the reason while the store fails, ok again after, and logs only the transitions', async () => {
    const chdb = new ChdbStore({ path: join(dir, 'data') });
    const store = new SwitchableStore(chdb);
    const lines: string[] = [];
    const up = await startUp({
      host: '127.0.0.1',
      port: 0,
      store,
      walDir: join(dir, 'wal'),
      logger: createLogger('rankwatch up', { write: (l) => lines.push(l), format: 'text' }),
    });
    try {
      const healthz = async () => {
        const r = await fetch(`${up.url}/healthz`);
        return {
          status: r.status,
          body: (await r.json()) as {
            ok: boolean;
            checks: Record<string, { ok: boolean; reason?: string; since?: string }>;
          },
        };
      };
      expect((await healthz()).status).toBe(200);
      store.down = true;
      const events = simLines('--ranks', '8', '--steps', '20', '--seed', '2', '--job', 'hj');
      expect(new Set(await postLines(up.url, events, {}, 500))).toEqual(new Set([200]));
      await until('several failed writes', () => (store.failures >= 4 ? true : undefined), 60_000);
      const bad = await healthz();
      expect(bad.status).toBe(503);
      expect(bad.body.ok).toBe(false);
      expect(bad.body.checks.store).toMatchObject({
        ok: false,
        reason: expect.stringMatching(/store endpoint down/),
      });
      expect(Date.parse(bad.body.checks.store.since ?? '')).toBeGreaterThan(0);
      const metrics = await (await fetch(`${up.url}/metrics`)).text();
      expect(metrics).toMatch(/rankwatch_health_check_ok\{check="store"\} 0/);
      expect(
        Number(/rankwatch_pipeline_store_retries_total (\d+)/.exec(metrics)?.[1]),
      ).toBeGreaterThanOrEqual(4);

      store.down = false;
      await until(
        'the store ok again',
        async () => ((await healthz()).status === 200 ? true : undefined),
        60_000,
      );
      await up.pipeline.drain();
      const [row] = await chdb.query<{ n: string }>('SELECT count() AS n FROM events FINAL');
      expect(Number(row.n)).toBe(events.length);
      const storeLines = lines.filter((l) => /store/.test(l) && !l.includes('pipeline: '));
      expect(storeLines).toHaveLength(2);
      expect(storeLines[0]).toMatch(
        /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z WARN rankwatch up: store failing: /,
      );
      expect(storeLines[1]).toMatch(/^\S+Z INFO rankwatch up: store ok again .*failures=\d+/);
    } finally {
      await up.close();
      await chdb.close();
    }
  }, 180_000);

  it('a write-ahead log it cannot use stops the start with one clear error naming the folder', async () => {
    const chdb = new ChdbStore({ path: join(dir, 'data') });
    const notADir = join(dir, 'wal-is-a-file');
    writeFileSync(notADir, 'x');
    try {
      const err = await startUp({ host: '127.0.0.1', port: 0, store: chdb, walDir: notADir }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toMatchObject({ code: 'RANKWATCH_ERR_CONFIG' });
      expect((err as Error).message).toMatch(/write-ahead log .*wal-is-a-file.*--wal/);
    } finally {
      await chdb.close();
    }
  }, 60_000);
});
