/**
 * The store factory: `createStore(config)` opens the configured driver (not yet migrated; call
 * `migrate()`, or let the pipeline do it at start). The command line's flags and variables for it
 * (CLICKHOUSE_URL, CLICKHOUSE_USER, ...) are declared in cli/store-options.ts.
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
