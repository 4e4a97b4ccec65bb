/**
 * The server driver (store/clickhouse.ts) through @clickhouse/client: the store conformance suite,
 * connection settings, error classes, and a store outage end to end through the pipeline.
 *
 * Against a real server when CLICKHOUSE_URL is set (with CLICKHOUSE_USER / CLICKHOUSE_PASSWORD) or a
 * Docker engine runs (a testcontainers ClickHouse), in a throwaway database dropped afterwards
 * unless KEEP_UP=1. Otherwise, and always for the
 * outage tests (they stop the endpoint), against tests/fixtures/chdb-http-server.ts: ClickHouse's
 * HTTP interface served from the chDB engine in this process. This file opens no ChdbStore: chDB
 * allows one data folder per process, and vitest runs each test file in its own fork.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveOptions } from '../cli/args.js';
import { STORE_OPTIONS, storeConfig } from '../cli/store-options.js';
import { RankwatchError } from '../core/errors.js';
import { buildPipeline } from '../pipeline/build.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { ClickHouseStore, type ClickHouseStoreConfig } from '../store/clickhouse.js';
import { createStore } from '../store/index.js';
import { tableCounts } from '../store/queries.js';
import { eventRows } from '../store/rows.js';
import { SCHEMA_OBJECTS } from '../store/schema.js';
import { storeSuite } from '../store/store.suite.js';
import { MemoryTransport } from '../stream/memory.js';
import { batchByKey } from '../stream/transport.js';
import { type ChdbHttpServer, startChdbHttpServer } from './fixtures/chdb-http-server.js';
import { realClickHouse } from './fixtures/clickhouse-server.js';

const USER = 'rankwatch';
const PASSWORD = "p@ss:w0rd'\\";
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-chdb-http-'));
let fixture: ChdbHttpServer;
// A real server when CLICKHOUSE_URL is set or Docker runs (testcontainers); else the fixture.
const server = await realClickHouse();
const real = server?.url;
const database = `rankwatch_test_${process.pid}_${Date.now() % 1e6}`;
const opened: ClickHouseStore[] = [];

function fixtureConfig(extra: Partial<ClickHouseStoreConfig> = {}): ClickHouseStoreConfig {
  return {
    url: fixture.url,
    user: USER,
    password: PASSWORD,
    database,
    attempts: 2,
    retryBaseMs: 20,
    ...extra,
  };
}

function open(cfg: ClickHouseStoreConfig): ClickHouseStore {
  const s = new ClickHouseStore(cfg);
  opened.push(s);
  return s;
}

beforeAll(async () => {
  fixture = await startChdbHttpServer({ path: dir, user: USER, password: PASSWORD });
  await open(fixtureConfig()).migrate(); // the test database exists whichever test runs first
});

afterAll(async () => {
  if (real && process.env.KEEP_UP !== '1') {
    const admin = new ClickHouseStore({
      url: real,
      user: server?.user,
      password: server?.password,
    });
    await admin.exec(`DROP DATABASE IF EXISTS ${database}`).catch(() => undefined);
    await admin.close();
  }
  for (const s of opened) await s.close();
  await server?.stop();
  await fixture.close();
  rmSync(dir, { recursive: true, force: true });
});

const suiteStore = () =>
  open(real ? { url: real, user: server?.user, password: server?.password, database } : fixtureConfig());
let shared: ClickHouseStore | undefined;

storeSuite(server ? server.source : 'clickhouse driver over the chDB HTTP fixture', async () => {
  shared ??= suiteStore();
  await shared.migrate(); // creates the database on first use
  for (const t of SCHEMA_OBJECTS) await shared.exec(`DROP TABLE IF EXISTS ${t}`);
  await shared.migrate();
  return shared;
});

describe('clickhouse driver', () => {
  it('binds parameters of every common type', async () => {
    const s = open(fixtureConfig());
    await s.migrate();
    const [row] = await s.query<Record<string, unknown>>(
      'SELECT {s:String} AS s, {n:Int64} AS n, {f:Float64} AS f, {a:Array(String)} AS a, {z:Nullable(String)} AS z',
      { s: "it's a \\ \n\t test", n: 2 ** 40, f: 0.25, a: ["a'b", 'c\\d'], z: null },
    );
    expect(row).toEqual({ s: "it's a \\ \n\t test", n: 2 ** 40, f: 0.25, a: ["a'b", 'c\\d'], z: null });
  });

  it('says a rejected statement is a bug, not an outage, and does not retry it', async () => {
    const s = open(fixtureConfig());
    const before = fixture.requests;
    const err = await s.query('SELECT no_such_column FROM system.one').catch((e) => e);
    expect(err).toBeInstanceOf(RankwatchError);
    expect(err.code).toBe('RANKWATCH_ERR_STORE_QUERY');
    expect(err.retriable).toBe(false);
    expect(err.message).toMatch(/no_such_column/);
    expect(fixture.requests - before).toBe(1);
  });

  it('says wrong credentials are a configuration problem, without echoing the password', async () => {
    const s = open(fixtureConfig({ password: 'wrong-secret' }));
    const err = await s.query('SELECT 1').catch((e) => e);
    expect(err.code).toBe('RANKWATCH_ERR_CONFIG');
    expect(err.message).toMatch(/CLICKHOUSE_PASSWORD/);
    expect(err.message).not.toMatch(/wrong-secret/);
  });

  it('raises a retriable STORE_UNAVAILABLE naming the endpoint when it is down, after retrying', async () => {
    const s = open(
      fixtureConfig({
        url: fixture.url.replace('//', `//${USER}:${encodeURIComponent(PASSWORD)}@`),
        password: 'not-this',
        attempts: 3,
      }),
    );
    await s.migrate();
    await fixture.down();
    try {
      const t0 = performance.now();
      const err = await s
        .insert(eventRows([{ v: 1, kind: 'job_event', ts: Date.now(), job: 'j', event: 'start' }]))
        .catch((e) => e);
      expect(err).toBeInstanceOf(RankwatchError);
      expect(err.code).toBe('RANKWATCH_ERR_STORE_UNAVAILABLE');
      expect(err.retriable).toBe(true);
      expect(err.message).toContain(fixture.url);
      expect(err.message).not.toContain('w0rd');
      expect(err.describe()).toMatch(/rankwatch retries/);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(20 + 40 - 5); // two backoff waits
      expect((await s.query('SELECT 1').catch((e) => e)).code).toBe('RANKWATCH_ERR_STORE_UNAVAILABLE');
    } finally {
      await fixture.up();
    }
    expect(await s.query('SELECT 1 AS one')).toEqual([{ one: 1 }]);
  });

  it('times out a hung request as a retriable outage', async () => {
    const s = open(fixtureConfig({ requestTimeoutMs: 300, attempts: 1 }));
    const t0 = performance.now();
    const err = await s.query('SELECT sleepEachRow(0.5) FROM numbers(3)').catch((e) => e);
    expect(err.code).toBe('RANKWATCH_ERR_STORE_UNAVAILABLE');
    // The fixture runs one statement at a time, so the next one answers once the abandoned query has
    // finished: wait for that (the later tests want an idle fixture), with a generous deadline.
    const probe = open(fixtureConfig({ requestTimeoutMs: 30_000, attempts: 1 }));
    expect(await probe.query('SELECT 1 AS one')).toEqual([{ one: 1 }]);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(1_400); // the abandoned query did run to the end
  });

  it('builds stores from flags and env (createStore)', async () => {
    const storeConfigFrom = (flags: Record<string, string>, env: Record<string, string>) =>
      storeConfig(resolveOptions(STORE_OPTIONS, flags, env).values);
    const cfg = storeConfigFrom(
      { store: 'clickhouse', 'clickhouse-database': database },
      { CLICKHOUSE_URL: fixture.url, CLICKHOUSE_USER: USER, CLICKHOUSE_PASSWORD: PASSWORD },
    );
    expect(cfg).toMatchObject({ type: 'clickhouse', url: fixture.url, user: USER, database });
    const s = await createStore(cfg);
    opened.push(s as ClickHouseStore);
    expect(s.type).toBe('clickhouse');
    expect(await s.query('SELECT currentDatabase() AS d')).toEqual([{ d: database }]);
    expect(storeConfigFrom({}, {})).toMatchObject({ type: 'chdb', path: './data' });
    expect(storeConfigFrom({ 'min-free-mb': '128' }, {})).toMatchObject({ minFreeBytes: 128 * 2 ** 20 });
    expect(storeConfigFrom({}, { RANKWATCH_MIN_FREE_MB: '0' })).toMatchObject({ minFreeBytes: 0 });
    expect(() => storeConfigFrom({}, { RANKWATCH_MIN_FREE_MB: 'lots' })).toThrowError(
      /--min-free-mb \(RANKWATCH_MIN_FREE_MB\) needs a number, got "lots"/,
    );
    expect(storeConfigFrom({ 'raw-ttl-days': '7' }, {})).toMatchObject({ schema: { rawTtlDays: 7 } });
    expect(() => storeConfigFrom({}, { RANKWATCH_ROLLUP_TTL_DAYS: '0' })).toThrowError(
      /--rollup-ttl-days \(RANKWATCH_ROLLUP_TTL_DAYS\) needs a number of at least 1, got "0"/,
    );
    expect(() => storeConfigFrom({ store: 'clickhouse' }, {})).toThrowError(/CLICKHOUSE_URL/);
    expect(() => storeConfigFrom({ store: 'mysql' }, {})).toThrowError(/chdb, clickhouse/);
  });
});

describe('store outage through the pipeline', () => {
  it('holds the batch and retries while the endpoint is down, then stores everything once', async () => {
    const s = open(fixtureConfig({ database: `${database}_outage`, attempts: 1 }));
    const sim = new ClusterSim({
      ranks: 8,
      // Slow from step 5, before its own baseline exists: a chronic straggler, judged after ~20 steps.
      steps: 40,
      seed: 3,
      startTs: Date.now() - 600_000,
      collectives: false,
      faults: [parseFault('slow_rank:rank=2,at=5,slowdown=0.5')],
    });
    const events = [...sim.events()];
    const transport = new MemoryTransport({ maxQueuedBatches: 2, retryDelayMs: 20 });
    const retries: unknown[] = [];
    const pipeline = buildPipeline({ transport, store: s, onStoreRetry: (err) => retries.push(err) });
    await pipeline.start();
    await fixture.down();
    let published = false;
    const publishing = (async () => {
      for (let i = 0; i < events.length; i += 50)
        await transport.publish(batchByKey(events.slice(i, i + 50)));
      published = true;
    })();
    try {
      // The store is down: the pipeline retries and the bus stops taking batches (backpressure).
      const deadline = Date.now() + 20_000;
      while (retries.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(retries.length).toBeGreaterThanOrEqual(3);
      expect(published).toBe(false);
      for (const e of retries) {
        expect(e).toBeInstanceOf(RankwatchError);
        expect((e as RankwatchError).code).toBe('RANKWATCH_ERR_STORE_UNAVAILABLE');
      }
    } finally {
      await fixture.up();
    }
    await publishing;
    await pipeline.stop();
    const counts = await tableCounts(s);
    expect(counts.events).toBe(events.length);
    expect(counts.steps).toBe(events.filter((e) => e.kind === 'step').length);
    expect(counts.findings).toBeGreaterThan(0);
    expect(pipeline.counters().store_retries).toBe(retries.length);
    const [r] = await s.query<{ c: number }>('SELECT countMerge(steps) AS c FROM rank_minute');
    expect(r.c).toBe(counts.steps);
  });
});
