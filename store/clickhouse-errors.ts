/**
 * What a failed call to ClickHouse (server or chDB) means for the caller: the store, its disk or
 * the network is away for now (retriable: RANKWATCH_ERR_STORE_UNAVAILABLE, the pipeline holds the
 * batch and retries), the engine refuses the rows themselves (RANKWATCH_ERR_STORE_REFUSED, the
 * pipeline sets the refused event aside), the configuration is wrong (credentials, database), or
 * the statement is wrong.
 */
import { ClickHouseError } from '@clickhouse/client';
import { RankwatchError } from '../core/errors.js';

/**
 * Codes that mean the engine refuses the data itself (a value it cannot parse or hold): the same
 * rows fail every time, so the pipeline sets the event aside once it stands alone. Every other code
 * is about the store (disk full 243, too many parts 252, memory 241, timeouts 159/209, network 210,
 * file and errno trouble 74-77/1000/1001, read-only 164/242, a restart...) or unknown, and is an
 * outage: the batch is held and retried, never dead-lettered. Names from ClickHouse's
 * src/Common/ErrorCodes.cpp.
 */
const REFUSED = new Set([
  6, // CANNOT_PARSE_TEXT
  25, // CANNOT_PARSE_ESCAPE_SEQUENCE
  26, // CANNOT_PARSE_QUOTED_STRING
  27, // CANNOT_PARSE_INPUT_ASSERTION_FAILED
  38, // CANNOT_PARSE_DATE
  41, // CANNOT_PARSE_DATETIME
  53, // TYPE_MISMATCH
  69, // ARGUMENT_OUT_OF_BOUND
  70, // CANNOT_CONVERT_TYPE
  72, // CANNOT_PARSE_NUMBER
  117, // INCORRECT_DATA
  131, // TOO_LARGE_STRING_SIZE
  321, // VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
  349, // CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
  407, // DECIMAL_OVERFLOW
]);

/** Codes that mean the statement itself is wrong (a bug, or a schema changed under us). */
const STATEMENT = new Set([
  16, // NO_SUCH_COLUMN_IN_TABLE
  42, // NUMBER_OF_ARGUMENTS_DOESNT_MATCH
  43, // ILLEGAL_TYPE_OF_ARGUMENT
  46, // UNKNOWN_FUNCTION
  47, // UNKNOWN_IDENTIFIER
  60, // UNKNOWN_TABLE
  62, // SYNTAX_ERROR
  73, // UNKNOWN_FORMAT
  115, // UNKNOWN_SETTING
  184, // ILLEGAL_AGGREGATION
  456, // UNKNOWN_QUERY_PARAMETER
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

/** The server code an error carries: the client's ClickHouseError, chDB's `clickhouseCode`, or `Code: N.` in its text. */
export function serverCodeOf(err: unknown): number | undefined {
  const e = err as { code?: unknown; clickhouseCode?: unknown; message?: unknown } | undefined;
  if (err instanceof ClickHouseError) return Number(err.code);
  if (typeof e?.clickhouseCode === 'number') return e.clickhouseCode;
  if (/^\d+$/.test(String(e?.code))) return Number(e?.code);
  const m = /\bCode: (\d+)\./.exec(String(e?.message ?? ''));
  return m ? Number(m[1]) : undefined;
}

/**
 * The one classification of a store failure, for both drivers. `insert`: whether the call carried
 * rows, so a refusal of the data (REFUSED) is told apart from a wrong statement. Anything without a
 * known meaning is an outage (retriable): unknown is transient until proven otherwise.
 */
export function classifyStoreError(err: unknown, text: string, insert: boolean): RankwatchError {
  if (err instanceof RankwatchError) return err;
  // chDB refused to bind a parameter (a non-finite number, an integer beyond ±2^53) before the
  // engine saw the statement: a wrong call, never an outage to wait out.
  if ((err as { code?: unknown } | undefined)?.code === 'CHDB_BIND')
    return new RankwatchError('RANKWATCH_ERR_STORE_QUERY', text, { cause: err });
  const code = serverCodeOf(err);
  if (code !== undefined && REFUSED.has(code))
    return new RankwatchError(insert ? 'RANKWATCH_ERR_STORE_REFUSED' : 'RANKWATCH_ERR_STORE_QUERY', text, {
      cause: err,
    });
  if (code !== undefined && STATEMENT.has(code))
    return new RankwatchError('RANKWATCH_ERR_STORE_QUERY', text, { cause: err });
  if (code !== undefined && CONFIG.has(code))
    return new RankwatchError(
      'RANKWATCH_ERR_CONFIG',
      `${text}; check CLICKHOUSE_USER, CLICKHOUSE_PASSWORD, CLICKHOUSE_DATABASE`,
      { cause: err },
    );
  return new RankwatchError('RANKWATCH_ERR_STORE_UNAVAILABLE', text, { cause: err });
}

export function storeError(err: unknown, what: string, url: string, insert = false): RankwatchError {
  if (err instanceof RankwatchError) return err;
  const e = err as Error & { code?: string; type?: string };
  const code = serverCodeOf(err);
  if (code !== undefined)
    return classifyStoreError(
      err,
      `ClickHouse at ${url}: ${what} failed: ${String(e.message).trim()} (${e.type ?? code})`,
      insert,
    );
  // Anything that is not a ClickHouse exception came from the way there: refused or reset
  // connections, timeouts, a proxy's 502/503 page. The server may be back soon.
  const detail = [e?.code, e?.message].filter(Boolean).join(' ') || String(err);
  return new RankwatchError(
    'RANKWATCH_ERR_STORE_UNAVAILABLE',
    `ClickHouse at ${url} is unreachable: ${what} failed: ${detail.trim().slice(0, 300)}`,
    { cause: err },
  );
}
