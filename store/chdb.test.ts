import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ChdbStore } from './chdb.js';
import { SCHEMA_OBJECTS } from './schema.js';
import { storeSuite } from './store.suite.js';

// chDB opens one data folder per process: one store for the file, emptied between tests.
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-chdb-'));
const store = new ChdbStore({ path: dir });
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

storeSuite('chdb', async () => {
  for (const t of SCHEMA_OBJECTS) await store.exec(`DROP TABLE IF EXISTS ${t}`);
  await store.migrate();
  return store;
});

describe('chdb store', () => {
  it('refuses a second data folder in the same process, saying why', () => {
    expect(() => new ChdbStore({ path: join(dir, 'other') })).toThrowError(/one data folder per process/);
  });
});
