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

/** A time given as epoch ms or an ISO 8601 date; 400 naming the field otherwise. */
export function parseTime(v: string | undefined, field: string): number | undefined {
  if (v === undefined || v === '') return undefined;
  const t = /^\d+$/.test(v) ? Number(v) : Date.parse(v);
  if (!Number.isFinite(t))
    throw badRequest(field, `expected epoch milliseconds or an ISO 8601 time, got "${v}"`);
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

/** "90", "30s", "5m", "1h", "1d" as seconds; 400 naming the field otherwise. */
export function parseDuration(
  v: string | undefined,
  field: string,
  fallback: number,
  where = 'querystring',
): number {
  if (v === undefined || v === '') return fallback;
  const m = /^(\d+(?:\.\d+)?)([smhd]?)$/.exec(v);
  const s = m ? Number(m[1]) * UNIT_S[m[2]] : Number.NaN;
  if (!(s > 0)) throw badRequest(field, `expected a duration like 60, 30s, 5m or 1h, got "${v}"`, where);
  return s;
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
    if (Array.isArray(j) && j.length === 2 && Number.isFinite(j[0]) && typeof j[1] === 'string')
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
 * message (a collector reads them), and a body over the limit says its size and the fix.
 */
export function errorHandler(bodyLimit: number, o: { storeRoutes?: boolean } = {}) {
  return (err: FastifyError, req: FastifyRequest, reply: FastifyReply) => {
    const send = (statusCode: number, message: string, code?: string) =>
      reply
        .code(statusCode)
        .send({ statusCode, error: STATUS_CODES[statusCode] ?? 'Error', message, ...(code ? { code } : {}) });
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
      req.log.error({ err }, 'request failed');
      return send(500, err.message, err.code);
    }
    const status = err.statusCode ?? 500;
    if (status >= 500) req.log.error({ err }, 'request failed');
    return send(
      status,
      status >= 500 ? 'internal error; the server log has the details' : err.message,
      err.code,
    );
  };
}
