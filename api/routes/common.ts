/**
 * What the read routes share: the error reply, query-string parsing that names the field it
 * refuses (400), opaque paging cursors, and `step`/duration strings ("90", "30s", "5m", "1h").
 */
import { STATUS_CODES } from 'node:http';
import { type Static, type TSchema, Type } from '@sinclair/typebox';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { RankwatchError } from '../../core/errors.js';

export const ErrorReply = Type.Object(
  {
    statusCode: Type.Integer(),
    error: Type.String(),
    message: Type.String({ description: 'what went wrong and what to do about it' }),
    code: Type.Optional(Type.String()),
    request_id: Type.Optional(
      Type.String({ description: 'on a 5xx: the id its lines in the server log carry (also x-request-id)' }),
    ),
  },
  { additionalProperties: true },
);

/** The error replies every read route can give, by status. */
export const errors = (...codes: number[]) =>
  Object.fromEntries(codes.map((c) => [c, ErrorReply])) as Record<number, TSchema>;

export const READ_ERRORS = [400, 401, 403, 503] as const;

export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
  ) {
    super(message);
  }
}

export const notFound = (what: string) => new HttpError(404, what);
export const badRequest = (field: string, why: string, where = 'querystring') =>
  new HttpError(400, `${where}/${field}: ${why}`);

/**
 * The most rows one series or heatmap reply may hold: about 30 MB of JSON at a heatmap cell's
 * ~160 bytes. A 100k-rank job's heatmap at one column is 100,000 cells; a year of one-second MFU
 * buckets 31.5M points, which no client can use and which the server would build in memory.
 */
export const MAX_REPLY_ROWS = 200_000;

/**
 * 400 on `step` when buckets of `stepS` over [fromMs, toMs) times `rowsPerBucket` pass
 * MAX_REPLY_ROWS, naming the smallest step in whole `unitS` that fits, or why none does.
 */
export function boundReply(
  fromMs: number,
  toMs: number,
  stepS: number,
  rowsPerBucket: number,
  unitS = 1,
): void {
  const spanS = Math.max(0, toMs - fromMs) / 1000;
  const rows = (Math.floor(spanS / stepS) + 1) * rowsPerBucket;
  if (rows <= MAX_REPLY_ROWS) return;
  const fmt = (n: number) => n.toLocaleString('en-US');
  const per = rowsPerBucket > 1 ? ` (${fmt(rowsPerBucket)} per bucket)` : '';
  const buckets = Math.floor(MAX_REPLY_ROWS / rowsPerBucket) - 1;
  const fits =
    buckets < 1
      ? `no step fits: even one bucket is over it`
      : `use step=${Math.ceil(spanS / buckets / unitS) * unitS}s or more, or a shorter range (from, to)`;
  throw badRequest(
    'step',
    `${fmt(rows)} rows${per}, over the ${fmt(MAX_REPLY_ROWS)} one reply holds: ${fits}`,
  );
}

/**
 * Times the API takes: 1970-01-01 to 9999-12-31 (ISO 8601's four-digit years). No event is older
 * (the contract's `ts` is epoch ms ≥ 0), and the store's bound parameters hold epoch ms only up
 * to ±2^53, so a time outside is a client's mistake, not a store failure.
 */
export const MAX_TIME = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

const quoted = (v: string) => JSON.stringify(v.length > 80 ? `${v.slice(0, 80)}…` : v);

/** A time given as epoch ms or an ISO 8601 date; 400 naming the field otherwise. */
export function parseTime(v: string | undefined, field: string): number | undefined {
  if (v === undefined || v === '') return undefined;
  const t = /^\d+$/.test(v) ? Number(v) : Date.parse(v);
  if (!Number.isFinite(t))
    throw badRequest(field, `expected epoch milliseconds or an ISO 8601 time, got ${quoted(v)}`);
  if (t < 0 || t > MAX_TIME)
    throw badRequest(
      field,
      `${quoted(v)} is outside 1970-01-01 … 9999-12-31 (epoch ms 0 … ${MAX_TIME}); no event lies there`,
    );
  return t;
}

export const TimeQuery = {
  from: Type.Optional(Type.String({ description: 'start, inclusive: epoch ms or ISO 8601' })),
  to: Type.Optional(Type.String({ description: 'end, exclusive: epoch ms or ISO 8601' })),
};

export function parseRange(q: { from?: string; to?: string }): { from?: number; to?: number } {
  const from = parseTime(q.from, 'from');
  const to = parseTime(q.to, 'to');
  if (from !== undefined && to !== undefined && to <= from) throw badRequest('to', 'must be after from');
  return { from, to };
}

const UNIT_S: Record<string, number> = { '': 1, s: 1, m: 60, h: 3600, d: 86400 };
export const DURATION = '^[0-9]+(\\.[0-9]+)?[smhd]?$';
/** The longest duration taken: 100 years (a longer `since` reaches before 1970, a longer step holds no second bucket). */
export const MAX_DURATION_S = 36_500 * 86_400;

/** "90", "30s", "5m", "1h", "1d" as seconds, up to 100 years; 400 naming the field otherwise. */
export function parseDuration(
  v: string | undefined,
  field: string,
  fallback: number,
  where = 'querystring',
): number {
  if (v === undefined || v === '') return fallback;
  const m = /^(\d+(?:\.\d+)?)([smhd]?)$/.exec(v);
  const s = m ? Number(m[1]) * UNIT_S[m[2]] : Number.NaN;
  if (!(s > 0))
    throw badRequest(field, `expected a duration like 60, 30s, 5m or 1h, got ${quoted(v)}`, where);
  if (s > MAX_DURATION_S) throw badRequest(field, `${quoted(v)} is over 100 years (36500d)`, where);
  return s;
}

/** A series' bucket width (`step`): whole seconds, at least 1 (default 60). */
export function parseStep(v: string | undefined): number {
  const s = parseDuration(v, 'step', 60);
  if (!Number.isInteger(s) || s < 1)
    throw badRequest('step', `expected whole seconds, at least 1 (60, 30s, 5m, 1h), got ${quoted(v ?? '')}`);
  return s;
}

type Schema = { type?: unknown; properties?: Record<string, Schema> } | undefined;
const numeric = (s: Schema) => s?.type === 'number' || s?.type === 'integer';
/** "1e309", "Infinity", "-9e999": what Number() reads as ±Infinity. */
const nonFinite = (v: unknown) => typeof v === 'string' && Math.abs(Number(v)) === Number.POSITIVE_INFINITY;

/**
 * A preValidation hook for every route: ajv coerces "1e309" or "Infinity" in a query string or
 * path to Infinity for a number or integer field, then skips that field's minimum and maximum
 * (ajv-validator/ajv#2212, fastify/fastify#6718), so `limit=1e309` reached the store. Such a value
 * is refused here with a 400 naming the field, before validation.
 */
export async function refuseNonFinite(req: FastifyRequest): Promise<void> {
  const schema = req.routeOptions.schema as { querystring?: Schema; params?: Schema } | undefined;
  if (!schema) return;
  for (const [where, values] of [
    ['querystring', req.query],
    ['params', req.params],
  ] as const) {
    const props = schema[where]?.properties;
    if (!props || !values) continue;
    for (const [field, v] of Object.entries(values as Record<string, unknown>))
      if (numeric(props[field]) && (Array.isArray(v) ? v.some(nonFinite) : nonFinite(v)))
        throw badRequest(field, `${quoted(String(v))} is not a finite number`, where);
  }
}

export const Cursor = Type.Tuple([Type.Number(), Type.String()]);

/** Paging cursors are opaque to clients: base64url of the last row's sort key. */
export const encodeCursor = (ts: number, id: string) =>
  Buffer.from(JSON.stringify([ts, id])).toString('base64url');

export function decodeCursor(v: string | undefined): { ts: number; id: string } | undefined {
  if (v === undefined || v === '') return undefined;
  let parsed: Static<typeof Cursor> | undefined;
  try {
    const j = JSON.parse(Buffer.from(v, 'base64url').toString('utf8'));
    if (
      Array.isArray(j) &&
      j.length === 2 &&
      Number.isFinite(j[0]) &&
      j[0] >= 0 &&
      j[0] <= MAX_TIME &&
      typeof j[1] === 'string'
    )
      parsed = [j[0], j[1]];
  } catch {}
  if (!parsed)
    throw badRequest(
      'cursor',
      'not a cursor this API gave out (use next_cursor of the previous page, or leave it out)',
    );
  return { ts: parsed[0], id: parsed[1] };
}

/**
 * The one error handler: 4xx say what was refused (validation messages name the field), a store
 * that is down or closed is a 503 with its reason (read routes), a RankwatchError keeps its code and
 * message (a collector reads them), and a body over the limit says its size and the fix. Every 5xx
 * carries the request id (`request_id`, as in the `x-request-id` header); a 500 is logged in full
 * under it.
 */
export function errorHandler(bodyLimit: number, o: { storeRoutes?: boolean } = {}) {
  return (err: FastifyError, req: FastifyRequest, reply: FastifyReply) => {
    const send = (statusCode: number, message: string, code?: string) =>
      reply.code(statusCode).send({
        statusCode,
        error: STATUS_CODES[statusCode] ?? 'Error',
        message,
        ...(code ? { code } : {}),
        ...(statusCode >= 500 ? { request_id: req.id } : {}),
      });
    if (err instanceof HttpError) return send(err.statusCode, err.message);
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE')
      return send(
        413,
        `request body is over the ${bodyLimit} byte limit: gzip it or split it into smaller batches`,
        err.code,
      );
    if (err instanceof RankwatchError) {
      // On the read routes the store is the only thing that can be away (or closed, while stopping).
      if (o.storeRoutes && (err.retriable || err.code === 'RANKWATCH_ERR_STOPPED'))
        return send(503, `store unavailable: ${err.message}; retry later`, err.code);
      // A transient failure elsewhere (the write-ahead log's disk full, the bus away): nothing was
      // accepted, and the sender should keep its events and try again, not count them as refused.
      if (err.retriable) {
        req.log.warn({ err }, 'request held: transient failure');
        reply.header('retry-after', '1');
        return send(503, `${err.message}; nothing was accepted, retry later`, err.code);
      }
      req.log.error({ err }, 'request failed');
      return send(500, err.message, err.code);
    }
    const status = err.statusCode ?? 500;
    if (status >= 500) req.log.error({ err }, 'request failed');
    return send(
      status,
      status >= 500
        ? `internal error; the server log has the details under request id ${req.id}`
        : err.message,
      err.code,
    );
  };
}
