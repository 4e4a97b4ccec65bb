/**
 * The HTTP API as a fastify app, not yet listening: `rankwatch up` listens, tests use
 * `app.inject()`. One plugin per resource under api/routes/. Today: ingest and health; the
 * query API (jobs, MFU, findings, nodes) joins the same app later.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Health } from '../core/health.js';
import type { Metrics } from '../core/metrics.js';
import type { Publisher } from '../stream/transport.js';
import { healthRoutes } from './routes/healthz.js';
import { ingestRoutes } from './routes/ingest.js';

export interface AppDeps {
  /** Where accepted events go (the in-process bus of `rankwatch up`, or any Publisher). */
  publisher: Publisher;
  auth?: {
    /** Bearer token ingest requires; none configured means ingest is open (loopback use). */
    ingestToken?: string;
  };
  /** fastify logger: false (default), true, or a pino-compatible logger. */
  logger?: boolean | FastifyBaseLogger;
  /** Largest request body accepted, bytes (default 32 MiB). */
  bodyLimit?: number;
  /** Largest size a gzip body may inflate to, bytes (default 256 MiB). */
  maxInflatedBytes?: number;
  /** Extra figures for GET /healthz (pipeline counters, store state). */
  health?: () => Record<string, unknown>;
  /** Health checks: /healthz answers 503 with the reasons while one fails. */
  checks?: Health;
  /** Served on GET /metrics (Prometheus text). */
  metrics?: Metrics;
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    logger: deps.logger ?? false,
    bodyLimit: deps.bodyLimit ?? 32 << 20,
  });
  await app.register(healthRoutes, { health: deps.health, checks: deps.checks, metrics: deps.metrics });
  await app.register(ingestRoutes, {
    publisher: deps.publisher,
    token: deps.auth?.ingestToken,
    maxInflatedBytes: deps.maxInflatedBytes,
  });
  return app;
}
