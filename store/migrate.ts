/**
 * Applies the schema's migrations in order and records each, through any store's exec/query; then
 * brings TTLs to the configured retention (a changed `rawTtlDays` needs no new migration).
 *
 * Two processes starting together (two `detect`s on one server) take turns under a lock, so each
 * migration is applied and recorded once. ClickHouse has no advisory locks; insert deduplication
 * is its one compare-and-set: every taker inserts "epoch N+1 is mine" under the same token
 * (`take-N+1`), the engine keeps the first and drops the rest, and each reads back who got it.
 * A lock whose holder crashed is taken over once it is older than LOCK_STALE_MS.
 */
import { randomUUID } from 'node:crypto';
import { RankwatchError } from '../core/errors.js';

import { MIGRATIONS, MIGRATIONS_TABLE, SCHEMA_DEFAULTS, type SchemaOptions, ttlTargets } from './schema.js';
import type { Store } from './store.js';

/** What migrating needs of a store (every driver has it): statements, reads, inserts. */
type Execs = Pick<Store, 'exec' | 'query' | 'insert'>;

export async function applyMigrations(db: Execs, opts: Partial<SchemaOptions> = {}): Promise<number[]> {
  return migrateWith(db, { ...SCHEMA_DEFAULTS, ...opts });
}

/** The migration lock: one `take` row per epoch (deduplicated by token), a `release` row when done. */
const LOCK_TABLE = `CREATE TABLE IF NOT EXISTS schema_lock (
  epoch UInt64,
  kind LowCardinality(String),
  owner String,
  at DateTime64(3, 'UTC')
) ENGINE = MergeTree ORDER BY (epoch, kind)
SETTINGS non_replicated_deduplication_window = 1000`;

/** A holder silent this long is taken for dead (migrations here are DDL on metadata: seconds). */
export const LOCK_STALE_MS = 120_000;
const LOCK_WAIT_MS = 5 * 60_000;

async function withLock<T>(db: Execs, fn: () => Promise<T>): Promise<T> {
  await db.exec(LOCK_TABLE);
  const me = randomUUID();
  const row = (epoch: number, kind: string) => ({
    table: 'schema_lock',
    token: `${kind}-${epoch}`,
    rows: [JSON.stringify({ epoch, kind, owner: me, at: Date.now() })],
  });
  const giveUp = Date.now() + LOCK_WAIT_MS;
  for (let delay = 50; ; delay = Math.min(1_000, delay * 2)) {
    const [last] = await db.query<{ epoch: number; taken: number; released: number }>(
      `SELECT epoch, toUnixTimestamp64Milli(minIf(at, kind = 'take')) AS taken, countIf(kind = 'release') AS released
       FROM schema_lock GROUP BY epoch ORDER BY epoch DESC LIMIT 1`,
    );
    const epoch = Number(last?.epoch ?? 0);
    const free = !last || Number(last.released) > 0 || Date.now() - Number(last.taken) > LOCK_STALE_MS;
    if (free) {
      await db.insert([row(epoch + 1, 'take')]);
      const [holder] = await db.query<{ owner: string }>(
        "SELECT owner FROM schema_lock WHERE epoch = {e:UInt64} AND kind = 'take' ORDER BY at LIMIT 1",
        { e: epoch + 1 },
      );
      if (holder?.owner === me) {
        try {
          return await fn();
        } finally {
          await db.insert([row(epoch + 1, 'release')]);
        }
      }
    }
    if (Date.now() > giveUp)
      throw new RankwatchError(
        'RANKWATCH_ERR_STORE_UNAVAILABLE',
        `another process has held the schema migration lock (epoch ${epoch}) for over ${LOCK_WAIT_MS / 60_000} min; if none is migrating, wait ${LOCK_STALE_MS / 1000} s and start again`,
      );
    await new Promise((r) => setTimeout(r, delay));
  }
}

async function migrateWith(db: Execs, opts: SchemaOptions): Promise<number[]> {
  return withLock(db, () => migrateLocked(db, opts));
}

async function migrateLocked(db: Execs, opts: SchemaOptions): Promise<number[]> {
  await db.exec(MIGRATIONS_TABLE);
  const done = new Set(
    (await db.query<{ version: number }>('SELECT version FROM schema_migrations FINAL')).map((r) =>
      Number(r.version),
    ),
  );
  const applied: number[] = [];
  for (const m of MIGRATIONS) {
    if (done.has(m.version)) continue;
    for (const stmt of m.statements(opts)) await db.exec(stmt);
    await db.insert([
      {
        table: 'schema_migrations',
        rows: [JSON.stringify({ version: m.version, name: m.name, applied_at: Date.now() })],
      },
    ]);
    applied.push(m.version);
  }
  await applyRetention(db, opts);
  return applied;
}

/** Changes a table's TTL only when it differs from the configured one, so a second run is a no-op. */
async function applyRetention(db: Execs, opts: SchemaOptions): Promise<void> {
  const rows = await db.query<{ name: string; q: string }>(
    'SELECT name, create_table_query AS q FROM system.tables WHERE database = currentDatabase()',
  );
  const ddl = new Map(rows.map((r) => [r.name, r.q]));
  for (const { table, ttl } of ttlTargets(opts)) {
    const q = ddl.get(table);
    if (q === undefined || q.includes(`TTL ${ttl}`)) continue;
    // Table names come from the fixed schema list; the TTL is built from numbers.
    await db.exec(`ALTER TABLE ${table} MODIFY TTL ${ttl}`);
  }
}
