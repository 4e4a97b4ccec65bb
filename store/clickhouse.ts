/**
 * The server store: a ClickHouse server over HTTP(S) through `@clickhouse/client`. The same schema
 * and queries as the embedded store. Inserts send the rows already serialised by store/rows.ts as
 * one JSONEachRow body per table (no second JSON pass in JS), with the block-dedup setting that
 * keeps redelivered batches out of the rollups. Every call retries transient failures with capped
 * backoff, then raises RANKWATCH_ERR_STORE_UNAVAILABLE, which the pipeline keeps retrying while
 * it holds the batch (backpressure); a rejected statement raises RANKWATCH_ERR_STORE_QUERY.
 */
import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import {
  type ClickHouseClient,
  type ClickHouseClientConfigOptions,
  ClickHouseLogLevel,
  type ClickHouseSettings,
  createClient,
  drainStream,
} from '@clickhouse/client';
import { RankwatchError, retry } from '../core/errors.js';
import { storeError } from './clickhouse-errors.js';
import { applyMigrations } from './migrate.js';
import { type InsertBatch, insertBody } from './rows.js';
import { INSERT_SETTINGS, type SchemaOptions } from './schema.js';
import type { Store } from './store.js';

export interface ClickHouseStoreConfig {
  /** HTTP(S) endpoint, e.g. `https://clickhouse.internal:8443`. */
  url: string;
  user?: string;
  password?: string;
  /** Database for every table; created by `migrate` when missing (default `default`). */
  database?: string;
  /** PEM files for TLS: a private CA, and a client certificate and key for mutual TLS. */
  caCertPath?: string;
  certPath?: string;
  keyPath?: string;
  /** Per request, milliseconds (default 30 000). A request that times out is retried. */
  requestTimeoutMs?: number;
  /** Attempts per call before RANKWATCH_ERR_STORE_UNAVAILABLE reaches the caller (default 3). */
  attempts?: number;
  /** First retry delay in ms; doubles up to 2 s (default 100). */
  retryBaseMs?: number;
  /**
   * Server-side async inserts: helps many small writers; the pipeline already sends large batches,
   * so it is off by default. When on, the server deduplicates async inserts too.
   */
  asyncInsert?: boolean;
  /** gzip insert bodies (helps over a network; costs CPU). */
  compressRequests?: boolean;
  maxOpenConnections?: number;
  schema?: Partial<SchemaOptions>;
  /**
   * Experimental: a pre-built client connection instead of HTTP, e.g. chDB's `chdb/connection`
   * (in-process engine through this same driver). See docs/clickhouse.md before relying on it.
   */
  connection?: ClickHouseClientConfigOptions['connection'];
}

const IDENT = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The endpoint without credentials, for messages. */
function shown(url: string): string {
  try {
    const u = new URL(url);
    u.username = '';
    u.password = '';
    return u.toString().replace(/\/$/, '');
  } catch {
    return '(invalid url)';
  }
}

export class ClickHouseStore implements Store {
  readonly type = 'clickhouse';
  private client: ClickHouseClient | undefined;
  private readonly where: string;
  private readonly database: string;
  private readonly insertSettings: ClickHouseSettings;

  constructor(private readonly config: ClickHouseStoreConfig) {
    this.where = shown(config.url);
    this.database = config.database ?? 'default';
    if (!IDENT.test(this.database))
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `database: ${JSON.stringify(this.database)} is not a plain name`,
      );
    this.insertSettings = {
      ...INSERT_SETTINGS,
      ...(config.asyncInsert
        ? { async_insert: 1, wait_for_async_insert: 1, async_insert_deduplicate: 1 }
        : {}),
    };
    this.client = createClient(this.clientOptions(this.database));
  }

  private clientOptions(database: string): ClickHouseClientConfigOptions {
    const c = this.config;
    // Credentials in the URL win over user/password, and leave the URL so it can be shown.
    let url = c.url;
    let username = c.user;
    let password = c.password;
    try {
      const u = new URL(c.url);
      if (u.username) {
        username = decodeURIComponent(u.username);
        password = decodeURIComponent(u.password);
        u.username = '';
        u.password = '';
        url = u.toString();
      }
    } catch (err) {
      throw new RankwatchError('RANKWATCH_ERR_CONFIG', `clickhouse url: not a URL (${this.where})`, {
        cause: err,
      });
    }
    let tls: ClickHouseClientConfigOptions['tls'];
    try {
      if (c.caCertPath) {
        const ca_cert = readFileSync(c.caCertPath);
        tls =
          c.certPath && c.keyPath
            ? { ca_cert, cert: readFileSync(c.certPath), key: readFileSync(c.keyPath) }
            : { ca_cert };
      }
    } catch (err) {
      throw new RankwatchError('RANKWATCH_ERR_CONFIG', `TLS files: ${(err as Error).message}`, {
        cause: err,
      });
    }
    return {
      url,
      username,
      password,
      database,
      request_timeout: c.requestTimeoutMs ?? 30_000,
      max_open_connections: c.maxOpenConnections ?? 10,
      compression: { request: c.compressRequests ?? false, response: false },
      // Errors are thrown to the caller and counted there; the client's console logging would duplicate them.
      log: { level: ClickHouseLogLevel.OFF },
      application: 'rankwatch',
      ...(tls ? { tls } : {}),
      ...(c.connection ? { connection: c.connection } : {}),
    };
  }

  /** Retries transient failures, then raises a classified RankwatchError naming the endpoint. */
  private call<T>(what: string, fn: (c: ClickHouseClient) => Promise<T>, insert = false): Promise<T> {
    const client = this.live();
    return retry(
      async () => {
        try {
          return await fn(client);
        } catch (err) {
          throw storeError(err, what, this.where, insert);
        }
      },
      { attempts: this.config.attempts ?? 3, baseDelayMs: this.config.retryBaseMs ?? 100, maxDelayMs: 2_000 },
    );
  }

  async migrate(): Promise<void> {
    if (this.database !== 'default') {
      // The database must exist before a client bound to it can run anything.
      const admin = createClient(this.clientOptions('default'));
      try {
        await retry(
          async () => {
            try {
              // A checked plain name from configuration, not user data.
              await admin.command({ query: `CREATE DATABASE IF NOT EXISTS ${this.database}` });
            } catch (err) {
              throw storeError(err, 'CREATE DATABASE', this.where);
            }
          },
          { attempts: this.config.attempts ?? 3, baseDelayMs: this.config.retryBaseMs ?? 100 },
        );
      } finally {
        await admin.close();
      }
    }
    await applyMigrations(this, this.config.schema);
  }

  async insert(batches: InsertBatch[]): Promise<void> {
    for (const b of batches) {
      if (b.rows.length === 0) continue;
      if (!IDENT.test(b.table))
        throw new RankwatchError(
          'RANKWATCH_ERR_STORE_QUERY',
          `insert: ${JSON.stringify(b.table)} is not a table name`,
        );
      // The rows are encoded already: send them as the body as they are. `exec` with a raw stream
      // avoids client.insert's JSON.stringify of every row (rows would have to be parsed first).
      const { format, body } = insertBody(b);
      await this.call(
        `insert into ${b.table} (${b.rows.length} rows)`,
        async (c) => {
          const r = await c.exec({
            query: `INSERT INTO ${b.table} FORMAT ${format}`,
            values: Readable.from([body]),
            // Always said, '' when none: a connection that keeps settings between statements
            // (chdb/connection does) would otherwise reuse the last token and drop this block.
            clickhouse_settings: { ...this.insertSettings, insert_deduplication_token: b.token ?? '' },
          });
          await drainStream(r.stream);
        },
        true,
      );
    }
  }

  async query<T = Record<string, unknown>>(sql: string, params: Record<string, unknown> = {}): Promise<T[]> {
    return this.call('query', async (c) => {
      const rs = await c.query({
        query: sql,
        query_params: params,
        format: 'JSONEachRow',
        // 64-bit integers as JSON numbers, as chDB returns them: both drivers give rows of one shape.
        clickhouse_settings: { output_format_json_quote_64bit_integers: 0 },
      });
      return rs.json<T>();
    });
  }

  async exec(sql: string): Promise<void> {
    await this.call('statement', async (c) => {
      await c.command({ query: sql });
    });
  }

  /** True when the server answers. */
  async ping(): Promise<boolean> {
    const r = await this.live().ping();
    return r.success;
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    await c?.close();
  }

  private live(): ClickHouseClient {
    if (!this.client)
      throw new RankwatchError('RANKWATCH_ERR_STOPPED', `ClickHouse store for ${this.where} is closed`);
    return this.client;
  }
}
