/**
 * The store factory: `createStore(config)` opens the configured driver (not yet migrated; call
 * `migrate()`, or let the pipeline do it at start). `storeConfigFrom(flags, env)` reads the choice
 * from CLI flags first, then the environment (CLICKHOUSE_URL, CLICKHOUSE_USER, ...), so the CLI
 * and services share one way of saying where data lives.
 */
import { RankwatchError } from '../core/errors.js';
import type { ChdbStoreConfig } from './chdb.js';
import type { ClickHouseStoreConfig } from './clickhouse.js';
import type { Store } from './store.js';

export type StoreConfig =
  | ({ type: 'chdb' } & ChdbStoreConfig)
  | ({ type: 'clickhouse' } & ClickHouseStoreConfig);

export const STORE_TYPES = ['chdb', 'clickhouse'] as const;

/** Drivers load lazily: a server deployment never loads the embedded engine, and the reverse. */
export async function createStore(config: StoreConfig): Promise<Store> {
  switch (config.type) {
    case 'chdb': {
      const { ChdbStore } = await import('./chdb.js');
      const { type: _, ...rest } = config;
      return new ChdbStore(rest);
    }
    case 'clickhouse': {
      const { ClickHouseStore } = await import('./clickhouse.js');
      const { type: _, ...rest } = config;
      return new ClickHouseStore(rest);
    }
    default:
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `store: unknown type ${JSON.stringify((config as { type: unknown }).type)}; use one of ${STORE_TYPES.join(', ')}`,
      );
  }
}

/**
 * Flags (as parsed by the CLI, names without `--`) and their environment variables:
 *
 * | flag | env | meaning |
 * | --- | --- | --- |
 * | `store` | `RANKWATCH_STORE` | `chdb` (default) or `clickhouse`; `clickhouse` is implied by a URL |
 * | `data` | `RANKWATCH_DATA` | chDB data folder (default `./data`) |
 * | `min-free-mb` | `RANKWATCH_MIN_FREE_MB` | chDB: free space kept on the data disk (default 64 MiB or 1%) |
 * | `clickhouse-url` | `CLICKHOUSE_URL` | `http(s)://host:port` |
 * | `clickhouse-user` | `CLICKHOUSE_USER` | |
 * | `clickhouse-password` | `CLICKHOUSE_PASSWORD` | prefer the env var: flags show in `ps` |
 * | `clickhouse-database` | `CLICKHOUSE_DATABASE` | default `default`; created when missing |
 * | `clickhouse-ca` | `CLICKHOUSE_CA_CERT` | PEM file of a private CA |
 * | `clickhouse-cert`, `clickhouse-key` | `CLICKHOUSE_CERT`, `CLICKHOUSE_KEY` | client certificate for mutual TLS |
 * | `clickhouse-async-insert` | `CLICKHOUSE_ASYNC_INSERT` | `1`: server-side async inserts |
 * | `raw-ttl-days` | `RANKWATCH_RAW_TTL_DAYS` | days raw events are kept (default 30) |
 * | `rollup-ttl-days` | `RANKWATCH_ROLLUP_TTL_DAYS` | days rollups are kept (default 400) |
 */
export function storeConfigFrom(
  flags: Record<string, string | boolean | undefined>,
  env: Record<string, string | undefined> = process.env,
): StoreConfig {
  const get = (flag: string, envName: string) => {
    const v = flags[flag];
    return typeof v === 'string' && v !== '' ? v : env[envName] || undefined;
  };
  /** A number flag (then its variable) of at least `min` `unit`, or undefined when unset. */
  const amount = (flag: string, envName: string, min: number, unit: string) => {
    const v = get(flag, envName);
    if (v === undefined) return undefined;
    const n = Number(v);
    if (!Number.isFinite(n) || n < min)
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `${flag}: expected a number of ${unit} ≥ ${min}, got ${JSON.stringify(v)}`,
      );
    return n;
  };
  const rawTtlDays = amount('raw-ttl-days', 'RANKWATCH_RAW_TTL_DAYS', 1, 'days');
  const rollupTtlDays = amount('rollup-ttl-days', 'RANKWATCH_ROLLUP_TTL_DAYS', 1, 'days');
  const schema = {
    ...(rawTtlDays !== undefined ? { rawTtlDays } : {}),
    ...(rollupTtlDays !== undefined ? { rollupTtlDays } : {}),
  };
  const url = get('clickhouse-url', 'CLICKHOUSE_URL');
  const type = get('store', 'RANKWATCH_STORE') ?? (url ? 'clickhouse' : 'chdb');
  if (type === 'chdb') {
    const mb = amount('min-free-mb', 'RANKWATCH_MIN_FREE_MB', 0, 'MiB');
    return {
      type,
      path: get('data', 'RANKWATCH_DATA') ?? './data',
      schema,
      ...(mb === undefined ? {} : { minFreeBytes: Math.round(mb * 2 ** 20) }),
    };
  }
  if (type !== 'clickhouse')
    throw new RankwatchError(
      'RANKWATCH_ERR_CONFIG',
      `store: unknown type ${JSON.stringify(type)}; use one of ${STORE_TYPES.join(', ')}`,
    );
  if (!url)
    throw new RankwatchError(
      'RANKWATCH_ERR_CONFIG',
      'store clickhouse: set --clickhouse-url or CLICKHOUSE_URL (e.g. http://localhost:8123)',
    );
  try {
    new URL(url);
  } catch {
    throw new RankwatchError(
      'RANKWATCH_ERR_CONFIG',
      'clickhouse-url: not a URL (e.g. https://clickhouse.internal:8443)',
    );
  }
  const asyncInsert = get('clickhouse-async-insert', 'CLICKHOUSE_ASYNC_INSERT');
  return {
    type,
    url,
    user: get('clickhouse-user', 'CLICKHOUSE_USER'),
    password: get('clickhouse-password', 'CLICKHOUSE_PASSWORD'),
    database: get('clickhouse-database', 'CLICKHOUSE_DATABASE'),
    caCertPath: get('clickhouse-ca', 'CLICKHOUSE_CA_CERT'),
    certPath: get('clickhouse-cert', 'CLICKHOUSE_CERT'),
    keyPath: get('clickhouse-key', 'CLICKHOUSE_KEY'),
    asyncInsert: flags['clickhouse-async-insert'] === true || asyncInsert === '1' || asyncInsert === 'true',
    schema,
  };
}
