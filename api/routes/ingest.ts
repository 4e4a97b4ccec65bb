/**
 * POST /v1/ingest: a batch of v1 events as JSON lines (gzip by magic number or
 * Content-Encoding). Good events are published even when some lines are bad: 200 when any was
 * accepted, 400 when none was; the reply says how many were accepted and rejected, and which lines
 * were rejected and why. Rejected lines are kept as dead letters. A bearer token is
 * (ingest scope, api/auth.ts) is required when tokens are configured. The reply waits for the bus,
 * so a busy pipeline slows producers down instead of dropping their events. A 2xx means the events
 * are durable (in `rankwatch up`: fsynced to its write-ahead log); a failed publish is a 500 with its code.
 * The body is read as a stream within bounds (stream/ingest-limits.ts): past a request's limits a
 * 413, past what all requests may hold at once a 429 with Retry-After; either way nothing of it
 * is accepted.
 */

import { STATUS_CODES } from 'node:http';
import { Readable } from 'node:stream';
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { ingestStatus, readIngestBody } from '../../stream/ingest-body.js';
import { DEFAULT_INGEST_LIMITS, IngestBudget } from '../../stream/ingest-limits.js';
import { batchByKey, type Publisher } from '../../stream/transport.js';
import { DEFAULT_INGEST_RATE, limitRate } from './rate-limit.js';

/** The source rejected lines are stored under (dead_letters.source). */
const REJECTS_KEY = 'ingest';

/** Rejected lines listed in a reply; the count covers them all. */
const MAX_REASONS = 50;

/**
 * Events per batch on the bus. The pipeline handles a batch (detectors, the store's insert body)
 * in one turn of the event loop: as many as a collector sends keep each turn short, whatever the
 * size of the request.
 */
const DELIVERY_EVENTS = 5_000;

export interface IngestOptions {
  publisher: Publisher;
  /** Requests per second per client (token name and address); 0 turns the limit off. */
  ratePerSecond?: number;
  /** Largest body as sent, bytes (the app's bodyLimit); past it: 413. */
  maxBodyBytes?: number;
  /** Bytes of JSON lines a request may hold once inflated (default 16 MiB); past it: 413. */
  maxInflatedBytes?: number;
  /** Events (lines) a request may hold (default 50,000); past it: 413. */
  maxEvents?: number;
  /** What all requests being read or logged may hold at once (default 64 MiB of JSON lines); past it: 429. */
  budget?: IngestBudget;
}

const Rejection = Type.Object({ line: Type.Integer(), reason: Type.String() });
const IngestReply = Type.Object({
  accepted: Type.Integer({ description: 'events published to the pipeline' }),
  rejected: Type.Integer({ description: 'lines set aside' }),
  errors: Type.Optional(Type.Array(Rejection, { description: `the first ${MAX_REASONS} rejected lines` })),
  message: Type.Optional(Type.String()),
});

/** 401/403 from the auth hook, 429 from the rate limit or the ingest budget, 413 from the limits. */
const TooLarge = Type.Object({
  accepted: Type.Optional(Type.Integer()),
  rejected: Type.Optional(Type.Integer()),
  message: Type.String(),
  code: Type.Optional(Type.String()),
  error: Type.Optional(Type.String()),
  statusCode: Type.Optional(Type.Integer()),
});

export const ingestRoutes: FastifyPluginAsync<IngestOptions> = async (app, opts) => {
  // Bodies stay a stream whatever their declared type: gzip and JSON lines are read here.
  await limitRate(app, opts.ratePerSecond ?? DEFAULT_INGEST_RATE);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
  const budget = opts.budget ?? new IngestBudget();
  const limits = {
    maxBodyBytes: opts.maxBodyBytes ?? DEFAULT_INGEST_LIMITS.maxBodyBytes,
    maxInflatedBytes: opts.maxInflatedBytes ?? DEFAULT_INGEST_LIMITS.maxInflatedBytes,
    maxEvents: opts.maxEvents ?? DEFAULT_INGEST_LIMITS.maxEvents,
  };

  app.post(
    '/v1/ingest',
    {
      config: { scope: 'ingest' },
      schema: {
        summary: 'A batch of v1 events as JSON lines (gzip accepted)',
        tags: ['ingest'],
        response: {
          200: IngestReply,
          400: IngestReply,
          401: TooLarge,
          403: TooLarge,
          413: TooLarge,
          415: IngestReply,
          429: TooLarge,
        },
      },
    },
    async (req, reply) => {
      const stream = req.body;
      if (!(stream instanceof Readable)) return empty(reply);
      const declared = Number(req.headers['content-length']);
      const body = await readIngestBody(stream, {
        limits,
        budget,
        maxReasons: MAX_REASONS,
        declaredBytes: Number.isFinite(declared) ? declared : undefined,
      });
      if (!body.ok) {
        if (body.retryAfterS) reply.header('retry-after', String(body.retryAfterS));
        if (body.close) reply.header('connection', 'close');
        return reply.code(body.status).send({
          statusCode: body.status,
          error: STATUS_CODES[body.status],
          message: body.message,
          ...(body.code ? { code: body.code } : {}),
          accepted: 0,
          rejected: 0,
        });
      }
      try {
        const { good, lines, errors, rejected, rejects } = body;
        const batches = batchByKey(good, lines, DELIVERY_EVENTS);
        // Rejected lines travel with the good ones (one journal write): the pipeline stores them as
        // dead letters (table dead_letters), each with its line number and reason.
        if (rejects.length)
          batches.push({
            key: REJECTS_KEY,
            events: [],
            undecodable: rejects.map((r) => ({
              raw: r.raw,
              line: r.line,
              reason: `ingest line ${r.line}${req.principal ? ` (token ${req.principal})` : ''}: ${r.reason}`,
            })),
          });
        if (batches.length > 0) await opts.publisher.publish(batches);
        if (rejected === 0) return { accepted: good.length, rejected: 0 };
        return reply.code(ingestStatus(body)).send({
          accepted: good.length,
          rejected,
          errors,
          message: `${good.length} event(s) accepted, ${rejected} line(s) rejected and kept as dead letters`,
        });
      } finally {
        body.release();
      }
    },
  );
};

function empty(reply: FastifyReply) {
  return reply
    .code(400)
    .send({ accepted: 0, rejected: 0, message: 'empty body: send v1 events as JSON lines' });
}
