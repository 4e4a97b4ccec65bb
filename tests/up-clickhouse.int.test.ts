/**
 * `rankwatch up` writing to a ClickHouse server (`--clickhouse-url`) instead of chDB: the same
 * pipeline, the server driver. The server here is tests/fixtures/chdb-http-server.ts (ClickHouse's
 * HTTP interface served by the chDB engine, since no new-enough server installs here), or a real
 * one when CLICKHOUSE_URL is set or Docker runs (tests/fixtures/clickhouse-server.ts). This file opens no ChdbStore (one chDB folder per process).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClickHouseStore } from '../store/clickhouse.js';
import { findingsOf, tableCounts } from '../store/queries.js';
import { clickHouseForTest, type RealClickHouse } from './fixtures/clickhouse-server.js';
import { postLines, type Running, simLines, startRankwatch, until } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-up-ch-'));
const database = `rankwatch_up_${process.pid}`;

describe('rankwatch up --clickhouse-url', () => {
  let real: Omit<RealClickHouse, 'source'> | undefined;
  let serverUrl: string;
  let up: Running;

  beforeAll(async () => {
    real = await clickHouseForTest(join(dir, 'ch'));
    serverUrl = real.url;
    up = startRankwatch(
      ['up', '--port', '0', '--clickhouse-url', serverUrl, '--clickhouse-database', database],
      {
        ...process.env,
        CLICKHOUSE_URL: '',
        CLICKHOUSE_USER: real?.user ?? '',
        CLICKHOUSE_PASSWORD: real?.password ?? '',
      },
    );
    await until('the listening line', () => /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1]);
  });

  afterAll(async () => {
    up.kill();
    await real?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('stores every event once and the throttle finding in the server', async () => {
    const url = /listening on (http:\/\/\S+)/.exec(up.stdout())![1];
    expect(up.stdout()).toMatch(/storing in ClickHouse at http/);
    const lines = simLines(
      '--ranks',
      '16',
      '--steps',
      '120',
      '--seed',
      '8',
      '--job',
      'chjob',
      '--fault',
      'throttle:rank=5,at=30',
    );
    expect(new Set(await postLines(url, lines))).toEqual(new Set([200]));
    await until('the throttle finding', () =>
      /FOUND\s+throttle chjob/.test(up.stdout()) ? true : undefined,
    );
    expect(await up.stop()).toBe(0);

    const store = new ClickHouseStore({
      url: serverUrl,
      user: real?.user,
      password: real?.password,
      database,
    });
    try {
      expect((await tableCounts(store)).events).toBe(lines.length);
      const opened = (await findingsOf(store, 'chjob')).filter(
        (f) => f.state === 'open' && f.type === 'throttle',
      );
      expect(opened.map((f) => [f.host, f.gpu])).toEqual([['gpu-0000', 5]]);
    } finally {
      await store.close();
    }
  }, 180_000);
});
