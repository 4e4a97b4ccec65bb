/**
 * GET /healthz: ok (200) while every health check passes, 503 with each failing check's reason
 * and since when otherwise (store down, bus away, credentials refused), plus the figures the
 * server chooses to show. A degraded check (the cordon breaker tripped) answers 200 with
 * `status: "degraded"` and the check's reason. GET /metrics: Prometheus text, when the server
 * has a registry.
 */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsync } from 'fastify';
import type { Health } from '../../core/health.js';
import type { Metrics } from '../../core/metrics.js';

export interface HealthRouteOptions {
  health?: () => Record<string, unknown>;
  checks?: Health;
  metrics?: Metrics;
}

const Reply = Type.Object({ ok: Type.Boolean(), uptime_s: Type.Number() }, { additionalProperties: true });

export const healthRoutes: FastifyPluginAsync<HealthRouteOptions> = async (app, opts) => {
  const started = Date.now();
  app.get('/healthz', { schema: { response: { 200: Reply, 503: Reply } } }, async (_req, reply) => {
    const r = opts.checks?.report();
    const body = {
      ok: r?.ok ?? true,
      ...(r ? { status: r.status } : {}),
      uptime_s: Math.round((Date.now() - started) / 1000),
      ...(r ? { checks: r.checks } : {}),
      ...opts.health?.(),
    };
    return reply.code(body.ok ? 200 : 503).send(body);
  });
  const metrics = opts.metrics;
  if (metrics)
    app.get('/metrics', async (_req, reply) =>
      reply.header('content-type', metrics.contentType).send(await metrics.render()),
    );
};
