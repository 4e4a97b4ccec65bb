/**
 * The flags every long-running command shares to say where data lives: chDB (a folder, the
 * default) or a ClickHouse server (a URL). Parsing and the environment fallbacks live in
 * store/index.ts (storeConfigFrom); this file is the CLI's view of them.
 */

import { resolve } from 'node:path';
import { createStore, type StoreConfig, storeConfigFrom } from '../store/index.js';
import type { Store } from '../store/store.js';
import { detachPipedStdin } from './stdin.js';

export const STORE_FLAGS = {
  store: { type: 'string' },
  data: { type: 'string' },
  'min-free-mb': { type: 'string' },
  'clickhouse-url': { type: 'string' },
  'clickhouse-user': { type: 'string' },
  'clickhouse-password': { type: 'string' },
  'clickhouse-database': { type: 'string' },
  'clickhouse-ca': { type: 'string' },
  'clickhouse-cert': { type: 'string' },
  'clickhouse-key': { type: 'string' },
  'clickhouse-async-insert': { type: 'boolean' },
  'raw-ttl-days': { type: 'string' },
  'rollup-ttl-days': { type: 'string' },
} as const;

export const STORE_FLAGS_HELP = `  --store chdb|clickhouse    where data lives (default chdb; a ClickHouse URL implies clickhouse) [RANKWATCH_STORE]
  --data DIR                chDB data folder (default ./data)                 [RANKWATCH_DATA]
  --min-free-mb N           chDB: free space kept on its disk; below it inserts wait (default 64 or 1%) [RANKWATCH_MIN_FREE_MB]
  --clickhouse-url URL      ClickHouse server, e.g. https://ch.internal:8443   [CLICKHOUSE_URL]
  --clickhouse-user U       user                                              [CLICKHOUSE_USER]
  --clickhouse-password P   password (prefer the environment: flags show in ps) [CLICKHOUSE_PASSWORD]
  --clickhouse-database DB  database, created when missing (default default)   [CLICKHOUSE_DATABASE]
  --clickhouse-ca/--clickhouse-cert/--clickhouse-key FILE   PEM files for TLS [CLICKHOUSE_CA_CERT, _CERT, _KEY]
  --clickhouse-async-insert server-side async inserts                         [CLICKHOUSE_ASYNC_INSERT=1]
  --raw-ttl-days N          days raw events are kept (default 30)             [RANKWATCH_RAW_TTL_DAYS]
  --rollup-ttl-days N       days rollups are kept (default 400)               [RANKWATCH_ROLLUP_TTL_DAYS]`;

/**
 * Opens the store the flags (then the environment) name; not yet migrated. `warn` hears what the
 * driver wants an operator to know (default: a line on stderr).
 */
export async function openStore(
  values: Record<string, unknown>,
  warn: (message: string) => void = (m) => console.error(`rankwatch: warning: ${m}`),
): Promise<{ store: Store; where: string; config: StoreConfig }> {
  const config = storeConfigFrom(values as Record<string, string | boolean | undefined>);
  if (config.type === 'chdb') {
    config.path = resolve(config.path);
    config.warn = warn;
    detachPipedStdin();
  }
  const where = config.type === 'chdb' ? `chDB at ${config.path}` : `ClickHouse at ${redact(config.url)}`;
  return { store: await createStore(config), where, config };
}

function redact(url: string): string {
  const u = new URL(url);
  u.password = '';
  u.username = '';
  return u.toString();
}
