/** GET /healthz: liveness, with whatever figures the server chooses to show. */
import { Type } from '@sinclair/typebox';
import type { FastifyPluginAsync } from 'fastify';

export const healthRoutes: FastifyPluginAsync<{ health?: () => Record<string, unknown> }> = async (
  app,
  opts,
) => {
  const started = Date.now();
  app.get(
    '/healthz',
    {
      schema: {
        response: {
          200: Type.Object({ ok: Type.Boolean(), uptime_s: Type.Number() }, { additionalProperties: true }),
        },
      },
    },
    async () => ({ ok: true, uptime_s: Math.round((Date.now() - started) / 1000), ...opts.health?.() }),
  );
};
