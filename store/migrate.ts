/**
 * Applies the schema's migrations in order and records each, through any store's exec/query; then
 * brings TTLs to the configured retention (a changed `rawTtlDays` needs no new migration).
 */

import { MIGRATIONS, MIGRATIONS_TABLE, SCHEMA_DEFAULTS, type SchemaOptions, ttlTargets } from './schema.js';
import type { Store } from './store.js';

/** What migrating needs of a store (every driver has it): statements, reads, inserts. */
type Execs = Pick<Store, 'exec' | 'query' | 'insert'>;

export async function applyMigrations(db: Execs, opts: Partial<SchemaOptions> = {}): Promise<number[]> {
  return migrateWith(db, { ...SCHEMA_DEFAULTS, ...opts });
}

async function migrateWith(db: Execs, opts: SchemaOptions): Promise<number[]> {
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
