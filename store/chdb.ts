/**
 * The embedded store: the ClickHouse engine in this process (npm `chdb`), data under one folder.
 * Uses the engine's async calls (off the event loop) and its raw insert path (TSV or JSONEachRow bytes).
 * chDB allows one data folder per process: opening a second, different one is refused clearly.
 */
import { mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { Session } from 'chdb';
import { RankwatchError } from '../core/errors.js';
import { classifyStoreError } from './clickhouse-errors.js';
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

/**
 * What an engine failure means (store/clickhouse-errors.ts, shared with the server driver): disk
 * full, I/O and errno trouble, memory, too many parts or anything unknown is an outage (retried);
 * only a refusal of the rows themselves is STORE_REFUSED.
 */
function failure(err: unknown, what: string, insert: boolean): RankwatchError {
  const e = err as { message?: unknown; code?: unknown };
  const errno = typeof e?.code === 'string' && /^E[A-Z]+$/.test(e.code) ? ` (${e.code})` : '';
  return classifyStoreError(err, `${what}: ${String(e?.message ?? err).trim()}${errno}`, insert);
}

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

  /**
   * Tables are written in parallel (the engine parses and writes each insert on its own threads,
   * so the raw events and the step rows with their views overlap); one table's batches stay in
   * order. Every insert settles before a failure is raised, so a retry never races a running one.
   */
  async insert(batches: InsertBatch[]): Promise<void> {
    const s = this.live();
    const byTable = new Map<string, InsertBatch[]>();
    for (const b of batches)
      if (b.rows.length > 0) byTable.set(b.table, [...(byTable.get(b.table) ?? []), b]);
    const results = await Promise.allSettled(
      [...byTable.values()].map(async (list) => {
        for (const b of list) await this.insertOne(s, b);
      }),
    );
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  private async insertOne(s: Session, b: InsertBatch): Promise<void> {
    try {
      const { format, body } = insertBody(b);
      const settings = b.token
        ? { ...INSERT_SETTINGS, insert_deduplication_token: b.token }
        : INSERT_SETTINGS;
      await s.insert({ table: b.table, values: body, format, settings });
    } catch (err) {
      throw failure(err, `chDB at ${this.path}: insert into ${b.table} failed`, true);
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
      throw failure(err, `chDB at ${this.path}: query failed`, false);
    }
  }

  async exec(sql: string): Promise<void> {
    try {
      await this.live().queryAsync(sql);
    } catch (err) {
      throw failure(err, `chDB at ${this.path}: statement failed`, false);
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
