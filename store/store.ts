/**
 * Where events, MFU, rollups and findings are kept. One interface, two drivers: `chdb`
 * (the ClickHouse engine in-process, the embedded default) and `clickhouse` (a server).
 * Writes are idempotent (ReplacingMergeTree keys); reads bind every outside value as a
 * query parameter, never spliced into SQL.
 */
import type { InsertBatch } from './rows.js';

export interface Store {
  readonly type: string;
  /** Applies pending migrations; running it twice changes nothing. */
  migrate(): Promise<void>;
  /** Inserts each batch through the engine's insert path. Retriable errors are RankwatchErrors. */
  insert(batches: InsertBatch[]): Promise<void>;
  /** Runs a read; `params` fill `{name:Type}` placeholders. Rows come back as objects. */
  query<T = Record<string, unknown>>(sql: string, params?: Record<string, unknown>): Promise<T[]>;
  /** Runs a statement that returns nothing (DDL, OPTIMIZE). */
  exec(sql: string): Promise<void>;
  close(): Promise<void>;
}
