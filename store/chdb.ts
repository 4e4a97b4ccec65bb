/**
 * The embedded store: the ClickHouse engine in this process (npm `chdb`), data under one folder.
 * Uses the engine's async calls (off the event loop) and its raw insert path (TSV or JSONEachRow bytes).
 * chDB allows one data folder per process: opening a second, different one is refused clearly.
 *
 * After a failed insert the driver checks what the engine wrote before it retries (repair()): chDB
 * 26.7, when its disk fills mid-write, can commit parts whose files are all empty (reproduced on
 * tmpfs and ext4, store/chdb-outage.test.ts). Such a part answers every read with CORRUPTED_DATA,
 * and its block id keeps the retried batch out as a duplicate.
 */
import { accessSync, constants, mkdirSync, readdirSync, statfsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
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
  /** Where the driver says what an operator should know (a tmpfs data folder, parts it set aside). */
  warn?: (message: string) => void;
  /**
   * Free space the engine keeps on the data folder's disk: below it, inserts are refused
   * (NOT_ENOUGH_SPACE, held and retried) before a byte is written. Default: 64 MiB or 1% of the
   * filesystem, whichever is more.
   */
  minFreeBytes?: number;
}

const MIN_FREE_FLOOR = 64 * 2 ** 20;

/** statfs `type` of tmpfs (linux/magic.h). */
const TMPFS_MAGIC = 0x01021994;
/** Parts written this long before the first failed insert are checked, and inserts go on being checked this long after the last. */
const REPAIR_LOOKBACK_S = 60;
const PART_NAME = /^[A-Za-z0-9_-]+$/;

let openPath: string | undefined;

/**
 * Throws Node's own EACCES/EROFS (with the path) when this user cannot write the data folder or
 * what lies at its top (e.g. files a root run left): the engine says only "cannot create a
 * connection" then, which reads like a folder held by another process.
 */
function assertWritable(path: string): void {
  const rw = constants.R_OK | constants.W_OK;
  accessSync(path, rw | constants.X_OK);
  for (const name of readdirSync(path)) accessSync(join(path, name), rw);
}

/** The rows of a JSONEachRow answer. */
const rowsOf = <T = Record<string, unknown>>(text: string): T[] =>
  text
    ? text
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l) as T)
    : [];

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
  /** Since when inserts fail (the first failure of a spell) and the last failure: see repair(). */
  private troubleSince: number | undefined;
  private lastFailure = 0;
  private repairing: Promise<void> | undefined;
  /** Parts repair() found whole (parts never change), so a long outage does not check them again. */
  private readonly sound = new Set<string>();
  /**
   * INSERT_SETTINGS and a free-space floor: chDB 26.7 can commit empty parts when its disk fills
   * mid-write (see repair()), so the engine stops writing while some space is left.
   */
  private readonly insertSettings: Record<string, number>;
  /** Engine calls under way: a repair that reopens the folder waits for them. */
  private busy = 0;

  constructor(private readonly config: ChdbStoreConfig) {
    this.path = resolve(config.path);
    if (openPath !== undefined && openPath !== this.path) {
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `chDB already has ${openPath} open in this process; it allows one data folder per process (asked for ${this.path})`,
      );
    }
    mkdirSync(this.path, { recursive: true });
    assertWritable(this.path);
    const fs = statfsSync(this.path);
    if (fs.type === TMPFS_MAGIC)
      config.warn?.(
        `chDB data folder ${this.path} is on tmpfs: it is gone at reboot, and a full tmpfs makes the engine write empty parts more often than a disk does; use a disk-backed folder`,
      );
    const minFree = config.minFreeBytes ?? Math.max(MIN_FREE_FLOOR, Math.round(fs.blocks * fs.bsize * 0.01));
    this.insertSettings = { ...INSERT_SETTINGS, min_free_disk_bytes_to_perform_insert: minFree };
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
    if (this.troubleSince !== undefined) {
      this.repairing ??= this.repair(this.troubleSince).finally(() => {
        this.repairing = undefined;
      });
      await this.repairing;
    }
    const s = this.live();
    const byTable = new Map<string, InsertBatch[]>();
    for (const b of batches)
      if (b.rows.length > 0) byTable.set(b.table, [...(byTable.get(b.table) ?? []), b]);
    this.busy++;
    const results = await Promise.allSettled(
      [...byTable.values()].map(async (list) => {
        for (const b of list) await this.insertOne(s, b);
      }),
    ).finally(() => this.busy--);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      if ((failed.reason as RankwatchError).retriable) {
        this.lastFailure = Date.now();
        this.troubleSince ??= this.lastFailure;
      }
      throw failed.reason;
    }
  }

  /**
   * Before each insert from the first failure until a minute after the last: CHECK every part
   * written since shortly before the first failure (each part once; parts never change). Inserts
   * that succeed while the disk is full can leave empty parts too, and merges finish after the
   * insert that failed beside them. A broken part made by an insert is detached, which also drops
   * its block id, so the retry writes those rows again (a part the failed insert wrote whole
   * stays, and the retry skips it as a duplicate). A broken part made by a merge is left for the engine: reopening the
   * data folder sets it aside and brings back the parts it merged, which are kept on disk for a
   * while after a merge. What cannot come back: an insert the engine answered as done whose part
   * is empty (seen too). Throws (retriable) while the engine cannot check, e.g. the disk still full.
   */
  private async repair(troubleSince: number): Promise<void> {
    const s = this.live();
    const since = Math.floor(troubleSince / 1000) - REPAIR_LOOKBACK_S;
    const parts = await this.run(
      s,
      `SELECT table, name, min_block_number = max_block_number AND level <= 1 AS inserted
      FROM system.parts WHERE database = currentDatabase() AND active AND modification_time >= toDateTime(${since})`,
    );
    const broken: { table: string; name: string; inserted: boolean }[] = [];
    for (const p of parts as { table: string; name: string; inserted: number }[]) {
      if (!PART_NAME.test(p.table) || !PART_NAME.test(p.name) || this.sound.has(`${p.table}/${p.name}`))
        continue;
      const res = await this.run(
        s,
        `CHECK TABLE \`${p.table}\` PART '${p.name}' SETTINGS check_query_single_value_result = 0`,
      );
      if (res.some((r) => Number((r as { is_passed: unknown }).is_passed) !== 1))
        broken.push({ table: p.table, name: p.name, inserted: p.inserted === 1 });
      else this.sound.add(`${p.table}/${p.name}`);
    }
    for (const b of broken.filter((b) => b.inserted))
      await this.run(s, `ALTER TABLE \`${b.table}\` DETACH PART '${b.name}'`);
    const merged = broken.filter((b) => !b.inserted);
    if (merged.length > 0) {
      for (let waited = 0; this.busy > 0 && waited < 30_000; waited += 10) await sleep(10);
      s.close();
      this.session = new Session(this.path);
    }
    if (broken.length > 0)
      this.config.warn?.(
        `chDB left ${broken.length} part(s) with empty files while its disk was full (${broken.map((b) => `${b.table}/${b.name}`).join(', ')}); set aside. ` +
          'Merged parts give way to the parts they merged and a retried insert writes its rows again; rows the engine had already acknowledged in them are lost',
      );
    if (Date.now() - this.lastFailure > REPAIR_LOOKBACK_S * 1000) {
      this.troubleSince = undefined;
      this.sound.clear();
    }
  }

  /** A statement of repair(), failing as an outage of the store. */
  private async run(s: Session, sql: string): Promise<Record<string, unknown>[]> {
    try {
      return rowsOf((await s.queryAsync(sql, { format: 'JSONEachRow' })).text());
    } catch (err) {
      throw failure(err, `chDB at ${this.path}: checking parts after a failed insert`, false);
    }
  }

  private async insertOne(s: Session, b: InsertBatch): Promise<void> {
    try {
      const { format, body } = insertBody(b);
      const settings = b.token
        ? { ...this.insertSettings, insert_deduplication_token: b.token }
        : this.insertSettings;
      await s.insert({ table: b.table, values: body, format, settings });
    } catch (err) {
      throw failure(err, `chDB at ${this.path}: insert into ${b.table} failed`, true);
    }
  }

  async query<T = Record<string, unknown>>(sql: string, params: Record<string, unknown> = {}): Promise<T[]> {
    if (this.repairing) await this.repairing.catch(() => {});
    const s = this.live();
    this.busy++;
    try {
      const res =
        Object.keys(params).length > 0
          ? await s.queryBindAsync(sql, params, { format: 'JSONEachRow' })
          : await s.queryAsync(sql, { format: 'JSONEachRow' });
      return rowsOf<T>(res.text());
    } catch (err) {
      throw failure(err, `chDB at ${this.path}: query failed`, false);
    } finally {
      this.busy--;
    }
  }

  async exec(sql: string): Promise<void> {
    if (this.repairing) await this.repairing.catch(() => {});
    const s = this.live();
    this.busy++;
    try {
      await s.queryAsync(sql);
    } catch (err) {
      throw failure(err, `chDB at ${this.path}: statement failed`, false);
    } finally {
      this.busy--;
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
