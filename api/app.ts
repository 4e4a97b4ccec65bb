/**
 * The HTTP API as a fastify app, not yet listening: `rankwatch up` listens, tests use
 * `app.inject()`. One plugin per resource under api/routes/: ingest, health, and the read API
 * (jobs, findings, nodes, checkpoints, failures; api/routes/index.ts), each route declaring the token scope
 * it needs (api/auth.ts). docs/api.md describes them.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify';
import type { Automation } from '../actions/automation.js';
import type { Health } from '../core/health.js';
import type { Logger } from '../core/log.js';
import type { Metrics } from '../core/metrics.js';
import { fastifyTimeouts, SERVER_TIMEOUTS, type ServerTimeouts } from '../core/server-timeouts.js';
import type { Store } from '../store/store.js';
import { IngestBudget } from '../stream/ingest-limits.js';
import type { Publisher } from '../stream/transport.js';
import { type AuthToken, authTokens, installAuth } from './auth.js';
import { logRequests, newRequestId } from './request-log.js';
import { errorHandler, refuseNonFinite } from './routes/common.js';
import { installDocs } from './routes/docs.js';
import { healthRoutes } from './routes/healthz.js';
import { readRoutes } from './routes/index.js';
import { ingestRoutes } from './routes/ingest.js';
import { webRoutes } from './routes/web.js';

export interface AppDeps {
  /** Where accepted events go (the in-process bus of `rankwatch up`, or any Publisher); none: no ingest route. */
  publisher?: Publisher;
  /** What the read API (jobs, findings, nodes, ...) reads; none: no read routes. */
  store?: Store;
  auth?: {
    /** A read-and-ingest token (`--token`); with `tokens`, one more entry named `cli-token`. */
    ingestToken?: string;
    /**
     * Scoped tokens (`--auth FILE`, see api/auth.ts), or a function giving the ones in force now
     * (a file re-read on SIGHUP or change, api/auth-file.ts). No tokens at all: every route is
     * open (loopback use).
     */
    tokens?: AuthToken[] | (() => AuthToken[]);
  };
  /** The runtime log (core/log.ts): one line per request, and the details of every 500. None: silent. */
  logger?: Logger;
  /** Connection timeouts (default SERVER_TIMEOUTS). */
  timeouts?: Partial<ServerTimeouts>;
  /** Ingest requests per second per client (default 200; 0: no limit). */
  ingestRatePerSecond?: number;
  /** Largest request body accepted, bytes (default 32 MiB). */
  bodyLimit?: number;
  /** Bytes of JSON lines an ingest request may hold once inflated (default 16 MiB). */
  maxInflatedBytes?: number;
  /** Events an ingest request may hold (default 50,000). */
  maxIngestEvents?: number;
  /** What all ingest requests in flight may hold at once (default 64 MiB of JSON lines); past it: 429. */
  ingestBudget?: IngestBudget;
  /** Extra figures for GET /healthz (pipeline counters, store state). */
  health?: () => Record<string, unknown>;
  /** Health checks: /healthz answers 503 with the reasons while one fails. */
  checks?: Health;
  /** Served on GET /metrics (Prometheus text). */
  metrics?: Metrics;
  /** The cordon automation of `rankwatch up`, for the admin routes (api/routes/actions.ts); none: they answer 409. */
  automation?: Automation;
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const t = { ...SERVER_TIMEOUTS, ...deps.timeouts };
  const app = Fastify({
    // None: fastify's silent logger.
    loggerInstance: deps.logger as FastifyBaseLogger | undefined,
    // fastify's "incoming request" and "request completed" pair becomes one line (request-log.ts).
    logController: new LogController({ disableRequestLogging: true }),
    genReqId: newRequestId,
    bodyLimit: deps.bodyLimit ?? 32 << 20,
    ...fastifyTimeouts(t),
  });
  logRequests(app);
  const fixed = authTokens({ token: deps.auth?.ingestToken });
  const given = deps.auth?.tokens ?? [];
  const fromFile = typeof given === 'function' ? given : () => given;
  installAuth(app, fixed.length === 0 ? fromFile : () => [...fromFile(), ...fixed]);
  app.addHook('preValidation', refuseNonFinite);
  app.setErrorHandler(errorHandler(app.initialConfig.bodyLimit ?? 32 << 20));
  await installDocs(app);
  await app.register(healthRoutes, { health: deps.health, checks: deps.checks, metrics: deps.metrics });
  if (deps.publisher)
    await app.register(ingestRoutes, {
      publisher: deps.publisher,
      maxInflatedBytes: deps.maxInflatedBytes,
      maxBodyBytes: app.initialConfig.bodyLimit,
      maxEvents: deps.maxIngestEvents,
      budget: deps.ingestBudget ?? new IngestBudget(),
      ratePerSecond: deps.ingestRatePerSecond,
    });
  if (deps.store) await app.register(readRoutes, { store: deps.store, automation: deps.automation });
  // The built-in page (GET /) reads the routes above with the token typed into it.
  if (deps.store) await app.register(webRoutes);
  return app;
}
