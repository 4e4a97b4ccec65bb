/**
 * What a failed call to a ClickHouse server means for the caller: the server or the network is
 * away for now (retriable: RANKWATCH_ERR_STORE_UNAVAILABLE, the pipeline holds the batch and
 * retries), the configuration is wrong (credentials, database), or the statement is wrong.
 */
import { ClickHouseError } from '@clickhouse/client';
import { RankwatchError } from '../core/errors.js';

/** Server error codes that clear up by themselves: overload, timeouts, replicas and Keeper away. */
const TRANSIENT = new Set([
  159, // TIMEOUT_EXCEEDED
  164, // READONLY (replica in read-only mode while Keeper is away)
  202, // TOO_MANY_SIMULTANEOUS_QUERIES
  203, // NO_FREE_CONNECTION
  209, // SOCKET_TIMEOUT
  210, // NETWORK_ERROR
  225, // NO_ZOOKEEPER
  241, // MEMORY_LIMIT_EXCEEDED
  242, // TABLE_IS_READ_ONLY
  252, // TOO_MANY_PARTS
  279, // ALL_CONNECTION_TRIES_FAILED
  285, // TOO_FEW_LIVE_REPLICAS
  319, // UNKNOWN_STATUS_OF_INSERT
  394, // QUERY_WAS_CANCELLED
  425, // SYSTEM_ERROR
  999, // KEEPER_EXCEPTION
]);

/** Server error codes that mean the connection settings are wrong: say so, do not retry. */
const CONFIG = new Set([
  81, // UNKNOWN_DATABASE
  192, // UNKNOWN_USER
  193, // WRONG_PASSWORD
  194, // REQUIRED_PASSWORD
  195, // IP_ADDRESS_NOT_ALLOWED
  497, // ACCESS_DENIED
  516, // AUTHENTICATION_FAILED
]);

export function storeError(err: unknown, what: string, url: string): RankwatchError {
  if (err instanceof RankwatchError) return err;
  const e = err as Error & { code?: string; type?: string; clickhouseCode?: number };
  // A server exception: the client's ClickHouseError, or an in-process connection's error carrying a server code.
  const serverCode =
    err instanceof ClickHouseError
      ? Number(err.code)
      : typeof e?.clickhouseCode === 'number'
        ? e.clickhouseCode
        : /^\d+$/.test(String(e?.code))
          ? Number(e.code)
          : undefined;
  if (serverCode !== undefined) {
    const code = serverCode;
    const text = `ClickHouse at ${url}: ${what} failed: ${e.message.trim()} (${e.type ?? code})`;
    if (TRANSIENT.has(code))
      return new RankwatchError('RANKWATCH_ERR_STORE_UNAVAILABLE', text, { cause: err });
    if (CONFIG.has(code))
      return new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `${text}; check CLICKHOUSE_USER, CLICKHOUSE_PASSWORD, CLICKHOUSE_DATABASE`,
        {
          cause: err,
        },
      );
    return new RankwatchError('RANKWATCH_ERR_STORE_QUERY', text, { cause: err });
  }
  // Anything that is not a ClickHouse exception came from the way there: refused or reset
  // connections, timeouts, a proxy's 502/503 page. The server may be back soon.
  const detail = [e?.code, e?.message].filter(Boolean).join(' ') || String(err);
  return new RankwatchError(
    'RANKWATCH_ERR_STORE_UNAVAILABLE',
    `ClickHouse at ${url} is unreachable: ${what} failed: ${detail.trim().slice(0, 300)}`,
    { cause: err },
  );
}
