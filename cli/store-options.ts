/**
 * The options every long-running command shares to say where data lives: chDB (a folder, the
 * default) or a ClickHouse server (a URL), each with its environment twin, and the store config
 * they make.
 */

import { existsSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { RankwatchError } from '../core/errors.js';
import { createStore, type StoreConfig } from '../store/index.js';
import { SCHEMA_DEFAULTS } from '../store/schema.js';
import type { Store } from '../store/store.js';
import { defineOptions, type OptionValues } from './args.js';
import { detachPipedStdin } from './stdin.js';

export const STORE_OPTIONS = defineOptions({
  store: {
    kind: 'enum',
    values: ['chdb', 'clickhouse'],
    env: 'RANKWATCH_STORE',
    defaultText: 'chdb; a ClickHouse URL implies clickhouse',
    help: 'where data lives',
  },
  data: {
    kind: 'file',
    arg: 'DIR',
    env: 'RANKWATCH_DATA',
    default: './data',
    help: 'chDB data folder',
  },
  'min-free-mb': {
    kind: 'number',
    env: 'RANKWATCH_MIN_FREE_MB',
    defaultText: '64 or 1% of the disk, whichever is more',
    help: 'chDB: free space kept on its disk, MiB; below it inserts wait',
  },
  'clickhouse-url': {
    kind: 'url',
    env: 'CLICKHOUSE_URL',
    help: 'ClickHouse server, e.g. https://ch.internal:8443',
  },
  'clickhouse-user': { kind: 'string', arg: 'U', env: 'CLICKHOUSE_USER', help: 'user' },
  'clickhouse-password': {
    kind: 'string',
    arg: 'P',
    env: 'CLICKHOUSE_PASSWORD',
    help: 'password (prefer the environment: flags show in ps)',
  },
  'clickhouse-database': {
    kind: 'string',
    arg: 'DB',
    env: 'CLICKHOUSE_DATABASE',
    defaultText: 'the one named default',
    help: 'database, created when missing',
  },
  'clickhouse-ca': { kind: 'file', env: 'CLICKHOUSE_CA_CERT', help: 'PEM file of a private CA (TLS)' },
  'clickhouse-cert': { kind: 'file', env: 'CLICKHOUSE_CERT', help: 'client certificate, PEM (mutual TLS)' },
  'clickhouse-key': { kind: 'file', env: 'CLICKHOUSE_KEY', help: "the client certificate's key, PEM" },
  'clickhouse-async-insert': {
    kind: 'boolean',
    env: 'CLICKHOUSE_ASYNC_INSERT',
    help: 'server-side async inserts',
  },
  'raw-ttl-days': {
    kind: 'number',
    min: 1,
    env: 'RANKWATCH_RAW_TTL_DAYS',
    defaultText: String(SCHEMA_DEFAULTS.rawTtlDays),
    help: 'days raw events are kept',
  },
  'rollup-ttl-days': {
    kind: 'number',
    min: 1,
    env: 'RANKWATCH_ROLLUP_TTL_DAYS',
    defaultText: String(SCHEMA_DEFAULTS.rollupTtlDays),
    help: 'days rollups are kept',
  },
});

export type StoreValues = OptionValues<typeof STORE_OPTIONS>;

/** The store the options name (a ClickHouse URL alone implies the server). */
export function storeConfig(v: StoreValues): StoreConfig {
  const schema = {
    ...(v['raw-ttl-days'] !== undefined ? { rawTtlDays: v['raw-ttl-days'] } : {}),
    ...(v['rollup-ttl-days'] !== undefined ? { rollupTtlDays: v['rollup-ttl-days'] } : {}),
  };
  const url = v['clickhouse-url'];
  const type = v.store ?? (url ? 'clickhouse' : 'chdb');
  if (type === 'chdb') {
    const mb = v['min-free-mb'];
    return {
      type,
      path: v.data,
      schema,
      ...(mb === undefined ? {} : { minFreeBytes: Math.round(mb * 2 ** 20) }),
    };
  }
  if (!url)
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      '--store (RANKWATCH_STORE) clickhouse needs --clickhouse-url (CLICKHOUSE_URL), e.g. http://localhost:8123',
    );
  return {
    type,
    url,
    user: v['clickhouse-user'],
    password: v['clickhouse-password'],
    database: v['clickhouse-database'],
    caCertPath: v['clickhouse-ca'],
    certPath: v['clickhouse-cert'],
    keyPath: v['clickhouse-key'],
    asyncInsert: v['clickhouse-async-insert'],
    schema,
  };
}

/**
 * Opens the store the options name; not yet migrated. `warn` hears what the driver wants an
 * operator to know (default: a line on stderr).
 */
export async function openStore(
  values: StoreValues,
  warn: (message: string) => void = (m) => console.error(`rankwatch: warning: ${m}`),
): Promise<{ store: Store; where: string; config: StoreConfig }> {
  const config = storeConfig(values);
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

/**
 * Reading never creates a store: a mistyped --data would otherwise become an empty chDB folder
 * and the answer "no jobs". A folder chDB has written holds its `metadata` folder. Returns the
 * chDB folder ('' for a server).
 */
export function refuseMissingStore(values: StoreValues): string {
  const config = storeConfig(values);
  if (config.type !== 'chdb') return '';
  const at = resolve(config.path);
  const why = !existsSync(at)
    ? 'no such folder'
    : statSync(at).isDirectory() && !existsSync(join(at, 'metadata'))
      ? 'it holds no rankwatch data'
      : undefined;
  if (why)
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `no chDB data folder at ${at} (${why}), --data: give the folder rankwatch up, replay --data or demo wrote, or --api URL of a running server`,
    );
  return at;
}
