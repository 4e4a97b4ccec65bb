/**
 * POST /v1/ingest: a batch of v1 events as JSON lines (gzip by magic number or
 * Content-Encoding). Good events are published even when some lines are bad; the reply says how
 * many were accepted and, for a 400, which lines were rejected and why. A bearer token is
 * (ingest scope, api/auth.ts) is required when tokens are configured. The reply waits for the bus,
 * so a busy pipeline slows producers down instead of dropping their events. A 2xx means the events
 * are durable (in `rankwatch up`: fsynced to its write-ahead log); a failed publish is a 500 with its code.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { inflateText } from '../../stream/codec.js';
import { checkIngestText } from '../../stream/ingest-body.js';
import { batchByKey, type Publisher } from '../../stream/transport.js';
import { DEFAULT_INGEST_RATE, limitRate } from './rate-limit.js';

/** Rejected lines listed in a reply; the count covers them all. */
const MAX_REASONS = 50;

export interface IngestOptions {
  publisher: Publisher;
  /** Requests per second per client (token name and address); 0 turns the limit off. */
  ratePerSecond?: number;
  /** Largest size a gzip body may inflate to (default MAX_INFLATED_BYTES, 256 MiB); past it: 413. */
  maxInflatedBytes?: number;
}

const Rejection = Type.Object({ line: Type.Integer(), reason: Type.String() });
const IngestReply = Type.Object({
  accepted: Type.Integer({ description: 'events published to the pipeline' }),
  rejected: Type.Integer({ description: 'lines set aside' }),
  errors: Type.Optional(Type.Array(Rejection, { description: `the first ${MAX_REASONS} rejected lines` })),
  message: Type.Optional(Type.String()),
});

/** 413 comes from fastify itself (body over the limit) or from here (gzip inflating past its limit). */
const TooLarge = Type.Object({
  accepted: Type.Optional(Type.Integer()),
  rejected: Type.Optional(Type.Integer()),
  message: Type.String(),
  code: Type.Optional(Type.String()),
  error: Type.Optional(Type.String()),
  statusCode: Type.Optional(Type.Integer()),
});

export const ingestRoutes: FastifyPluginAsync<IngestOptions> = async (app, opts) => {
  // Bodies stay raw bytes whatever their declared type: gzip and JSON lines are decoded here.
  await limitRate(app, opts.ratePerSecond ?? DEFAULT_INGEST_RATE);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));

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
      const raw = req.body;
      if (!Buffer.isBuffer(raw)) return empty(reply);
      const body = inflateText(raw, opts.maxInflatedBytes);
      if ('error' in body)
        return reply
          .code(body.tooLarge ? 413 : 400)
          .send({ accepted: 0, rejected: 1, message: `body: ${body.error}` });
      const { good, lines, errors, rejected } = checkIngestText(body.text, MAX_REASONS);
      if (good.length > 0) await opts.publisher.publish(batchByKey(good, lines));
      if (rejected === 0) return { accepted: good.length, rejected: 0 };
      return reply.code(400).send({
        accepted: good.length,
        rejected,
        errors,
        message: `${rejected} line(s) rejected, ${good.length} event(s) accepted`,
      });
    },
  );
};

function empty(reply: FastifyReply) {
  return reply
    .code(400)
    .send({ accepted: 0, rejected: 0, message: 'empty body: send v1 events as JSON lines' });
}
