/**
 * One classification for both drivers: store trouble is an outage (retried, never dead-lettered),
 * only a refusal of the rows themselves is STORE_REFUSED. The messages are ClickHouse's own:
 * - NOT_ENOUGH_SPACE and CANNOT_PARSE_INPUT_ASSERTION_FAILED: printed by chDB (npm `chdb`) here,
 *   on a filled tmpfs and on a string in a UInt32 column (store/chdb-outage.test.ts does it live);
 * - TOO_MANY_PARTS: ClickHouse/ClickHouse#70822; MEMORY_LIMIT_EXCEEDED: ClickHouse/ClickHouse#65650;
 * - CANNOT_OPEN_FILE (errno 1): ClickHouse/ClickHouse#38281; Code 1001 filesystem error,
 *   Permission denied: ClickHouse/ClickHouse#58008; CANNOT_WRITE_TO_FILE_DESCRIPTOR: #1236.
 * The server driver gets them through @clickhouse/client's own parser (`parseError`), chDB as an
 * Error with `clickhouseCode`, as the engine throws them.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseError } from '@clickhouse/client';
import { describe, expect, it } from 'vitest';
import { ChdbStore } from './chdb.js';
import { classifyStoreError, storeError } from './clickhouse-errors.js';

const OUTAGES: [number, string][] = [
  [243, 'Code: 243. DB::Exception: Cannot reserve 1.00 MiB, not enough space. (NOT_ENOUGH_SPACE)'],
  [
    252,
    'Code: 252. DB::Exception: Too many parts (300). Merges are processing significantly slower than inserts. (TOO_MANY_PARTS)',
  ],
  [
    241,
    "Code: 241. DB::Exception: Memory limit (total) exceeded: would use 118.28 GiB (attempt to allocate chunk of 0 bytes), maximum: 115.26 GiB. OvercommitTracker decision: Memory overcommit isn't used. Waiting time or overcommit denominator are set to zero.: While executing AggregatingTransform. (MEMORY_LIMIT_EXCEEDED)",
  ],
  [
    76,
    'Code: 76. DB::Exception: Cannot open file /var/lib/clickhouse/store/7d6/7d667bfe-d486-4b51-9910-6f9a7f091a93/all_10526_10526_0/data.bin, errno: 1, strerror: Operation not permitted: While executing MergeTreeThread. (CANNOT_OPEN_FILE)',
  ],
  [
    75,
    'Code: 75. DB::Exception: Cannot write to file /table_path/tmp_insert_20160101_20160101_6013_6013_0/column1.mrk, errno: 14, strerror: Bad address',
  ],
  [
    1001,
    'Code: 1001. DB::Exception: std::exception. Code: 1001, type: std::__1::__fs::filesystem::filesystem_error, e.what() = filesystem error: in weakly_canonical: Permission denied',
  ],
];
const REFUSAL =
  'Code: 27. DB::Exception: Cannot parse input: expected \'"\' before: \'x","b":"y"}\\n\': (while reading the value of key a): (at row 1)\n: While executing ParallelParsingBlockInputFormat. (CANNOT_PARSE_INPUT_ASSERTION_FAILED)';

const chdbError = (code: number, message: string) =>
  Object.assign(new Error(message), { clickhouseCode: code });

describe('store error classification', () => {
  it.each(OUTAGES)('code %i is an outage on both drivers, for inserts and reads', (code, text) => {
    for (const insert of [true, false]) {
      expect(storeError(parseError(text), 'insert', 'http://ch:8123', insert)).toMatchObject({
        code: 'RANKWATCH_ERR_STORE_UNAVAILABLE',
        retriable: true,
      });
      expect(classifyStoreError(chdbError(code, text), 'chDB insert', insert)).toMatchObject({
        code: 'RANKWATCH_ERR_STORE_UNAVAILABLE',
        retriable: true,
      });
    }
  });

  it('a parse error on the rows is a refusal of an insert, and a statement error on a read', () => {
    expect(storeError(parseError(REFUSAL), 'insert', 'http://ch:8123', true).code).toBe(
      'RANKWATCH_ERR_STORE_REFUSED',
    );
    expect(classifyStoreError(chdbError(27, REFUSAL), 'chDB insert', true).code).toBe(
      'RANKWATCH_ERR_STORE_REFUSED',
    );
    expect(classifyStoreError(chdbError(27, REFUSAL), 'chDB query', false).code).toBe(
      'RANKWATCH_ERR_STORE_QUERY',
    );
  });

  it('an error without a code (errno, a reset connection, anything unknown) is an outage', () => {
    const eacces = Object.assign(new Error("EACCES: permission denied, mkdir '/data/rankwatch'"), {
      code: 'EACCES',
      errno: -13,
    });
    expect(classifyStoreError(eacces, 'chDB open', true).code).toBe('RANKWATCH_ERR_STORE_UNAVAILABLE');
    expect(classifyStoreError(new Error('something new'), 'chDB insert', true).code).toBe(
      'RANKWATCH_ERR_STORE_UNAVAILABLE',
    );
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    expect(storeError(reset, 'insert', 'http://ch:8123', true).code).toBe('RANKWATCH_ERR_STORE_UNAVAILABLE');
  });

  it('a parameter chDB cannot bind (Infinity, an integer past 2^53) is a wrong call, not an outage', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rankwatch-bind-'));
    const store = new ChdbStore({ path: join(dir, 'data') });
    try {
      for (const x of [Number.POSITIVE_INFINITY, 1e23])
        await expect(store.query('SELECT {x:Int64} AS x', { x })).rejects.toMatchObject({
          code: 'RANKWATCH_ERR_STORE_QUERY',
          retriable: false,
        });
      // The engine is up all along.
      expect(await store.query('SELECT {x:Int64} AS x', { x: 7 })).toEqual([{ x: 7 }]);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
