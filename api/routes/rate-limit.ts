/**
 * A per-client request rate limit (@fastify/rate-limit) for the plugin it is installed in: ingest.
 * A client is its token name and address, so collectors sharing one token are limited one by one.
 */
import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance } from 'fastify';
import { HttpError } from './common.js';

/** Requests per second per client by default: far above a collector (one batch a second or so). */
export const DEFAULT_INGEST_RATE = 200;

export async function limitRate(app: FastifyInstance, perSecond: number): Promise<void> {
  if (!(perSecond > 0)) return;
  await app.register(rateLimit, {
    max: Math.ceil(perSecond * 10),
    timeWindow: 10_000,
    keyGenerator: (req) => `${req.principal ?? ''}@${req.ip}`,
    errorResponseBuilder: (_req, ctx) =>
      new HttpError(
        429,
        `over ${perSecond} requests/s from this client: send more events per request (batch), or raise the server's --ingest-rate; retry in ${ctx.after}`,
      ),
  });
}
