/** Applies the schema's migrations in order and records each, through any store's exec/query. */
import { MIGRATIONS, MIGRATIONS_TABLE, SCHEMA_DEFAULTS, type SchemaOptions } from './schema.js';

interface Execs {
  exec(sql: string): Promise<void>;
  query<T>(sql: string, params?: Record<string, unknown>): Promise<T[]>;
  insertRows(table: string, rows: string[]): Promise<void>;
}

export async function applyMigrations(db: Execs, opts: SchemaOptions = SCHEMA_DEFAULTS): Promise<number[]> {
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
    await db.insertRows('schema_migrations', [
      JSON.stringify({ version: m.version, name: m.name, applied_at: Date.now() }),
    ]);
    applied.push(m.version);
  }
  return applied;
}
