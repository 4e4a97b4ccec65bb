/**
 * Experimental path (docs/clickhouse.md, "chDB as the client's connection"): the server driver's
 * own code, @clickhouse/client included, over chDB's `chdb/connection` instead of HTTP. The same
 * conformance suite runs on it, so the day it becomes the embedded driver nothing else changes.
 * Its own test file: chDB allows one data folder per process.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createChdbConnection } from 'chdb/connection';
import { afterAll } from 'vitest';
import { ClickHouseStore, type ClickHouseStoreConfig } from '../store/clickhouse.js';
import { SCHEMA_OBJECTS } from '../store/schema.js';
import { storeSuite } from '../store/store.suite.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-chdb-conn-'));
// The URL is never dialled: the connection replaces HTTP. It names the store in messages.
// chdb declares the Connection type against its own copy of @clickhouse/client-common: same shape, other identity.
const connection = createChdbConnection({ path: dir }) as unknown as ClickHouseStoreConfig['connection'];
const store = new ClickHouseStore({ url: 'http://chdb.in-process', connection });
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

storeSuite('clickhouse driver over chdb/connection (in-process)', async () => {
  for (const t of SCHEMA_OBJECTS) await store.exec(`DROP TABLE IF EXISTS ${t}`);
  await store.migrate();
  return store;
});
