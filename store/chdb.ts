/**
 * The embedded store: the ClickHouse engine in this process (npm `chdb`), data under one folder.
 * Uses the engine's async calls (off the event loop) and its raw insert path (TSV or JSONEachRow bytes).
 * chDB allows one data folder per process: opening a second, different one is refused clearly.
 */
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { Session } from 'chdb';
import { RankwatchError } from '../core/errors.js';
import { applyMigrations } from './migrate.js';
import { type InsertBatch, insertBody } from './rows.js';
import { INSERT_SETTINGS, type SchemaOptions } from './schema.js';
import type { Store } from './store.js';

export interface ChdbStoreConfig {
  /** Data folder; created when missing. */
  path: string;
  schema?: Partial<SchemaOptions>;
}

let openPath: string | undefined;

export class ChdbStore implements Store {
  readonly type = 'chdb';
  private session: Session | undefined;
  private readonly path: string;

  constructor(private readonly config: ChdbStoreConfig) {
    this.path = resolve(config.path);
    if (openPath !== undefined && openPath !== this.path) {
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `chDB already has ${openPath} open in this process; it allows one data folder per process (asked for ${this.path})`,
      );
    }
    mkdirSync(this.path, { recursive: true });
    this.session = new Session(this.path);
    openPath = this.path;
  }

  async migrate(): Promise<void> {
    await applyMigrations(this, this.config.schema);
  }

  async insert(batches: InsertBatch[]): Promise<void> {
    const s = this.live();
    for (const b of batches) {
      if (b.rows.length === 0) continue;
      try {
        const { format, body } = insertBody(b);
        await s.insert({ table: b.table, values: body, format, settings: INSERT_SETTINGS });
      } catch (err) {
        throw new RankwatchError(
          'RANKWATCH_ERR_STORE_QUERY',
          `chDB insert into ${b.table} failed: ${(err as Error).message}`,
          {
            cause: err,
          },
        );
      }
    }
  }

  async query<T = Record<string, unknown>>(sql: string, params: Record<string, unknown> = {}): Promise<T[]> {
    const s = this.live();
    try {
      const res =
        Object.keys(params).length > 0
          ? await s.queryBindAsync(sql, params, { format: 'JSONEachRow' })
          : await s.queryAsync(sql, { format: 'JSONEachRow' });
      const text = res.text();
      return text
        ? text
            .trimEnd()
            .split('\n')
            .map((l) => JSON.parse(l) as T)
        : [];
    } catch (err) {
      throw new RankwatchError('RANKWATCH_ERR_STORE_QUERY', `chDB query failed: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }

  async exec(sql: string): Promise<void> {
    try {
      await this.live().queryAsync(sql);
    } catch (err) {
      throw new RankwatchError(
        'RANKWATCH_ERR_STORE_QUERY',
        `chDB statement failed: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
  }

  async close(): Promise<void> {
    if (!this.session) return;
    this.session.close();
    this.session = undefined;
    if (openPath === this.path) openPath = undefined;
  }

  private live(): Session {
    if (!this.session)
      throw new RankwatchError('RANKWATCH_ERR_STOPPED', `chDB store at ${this.path} is closed`);
    return this.session;
  }
}
