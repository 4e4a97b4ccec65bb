/**
 * GET /openapi.json, generated from the route schemas (@fastify/swagger), and a docs page at
 * /docs (@fastify/swagger-ui). Installed on the root app before any route, so it sees them all.
 */
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';

export async function installDocs(app: FastifyInstance): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.0.3',
      info: {
        title: 'rankwatch',
        version: '1',
        description:
          'Training-job observability: jobs, MFU, per-rank compute, findings, node health. Send "Authorization: Bearer <token>"; each route names the scope it needs.',
      },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
    },
    transform: ({ schema, url, route }) => {
      const scope = route.config?.scope;
      const s = { ...(schema ?? {}) } as Record<string, unknown>;
      if (scope && scope !== 'public') {
        s.security = [{ bearer: [] }];
        s.description = [`Scope: ${scope}.`, s.description].filter(Boolean).join(' ');
      }
      return { schema: s, url };
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs' });
  app.get('/openapi.json', { config: { scope: 'public' }, schema: { hide: true } }, async () =>
    app.swagger(),
  );
}
