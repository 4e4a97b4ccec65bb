/**
 * One log line per request: method, route, status, duration, client address and the token's name
 * (bound by api/auth.ts; never the token), under the request id every reply carries in
 * `x-request-id`, so a 500's "the server log has the details" leads to its line. The probes that
 * answer well (/healthz, /metrics, polled every few seconds) log at debug.
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';

/** 12 random characters: unique across restarts (fastify's own ids restart at req-1), and never the client's. */
export const newRequestId = () => randomBytes(9).toString('base64url');

const PROBES = new Set(['/healthz', '/metrics']);

export function logRequests(app: FastifyInstance): void {
  app.addHook('onRequest', async (req, reply) => {
    reply.header('x-request-id', req.id);
  });
  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url;
    const status = reply.statusCode;
    const line = {
      method: req.method,
      route: route ?? '(none)',
      // A path no route matched (a 404, a scanner) is worth seeing; cut, as it is the client's text.
      ...(route === undefined ? { path: req.url.split('?')[0].slice(0, 200) } : {}),
      status,
      ms: Math.round(reply.elapsedTime * 10) / 10,
      ip: req.ip,
    };
    if (status < 400 && route !== undefined && PROBES.has(route)) req.log.debug(line, 'request');
    else req.log.info(line, 'request');
  });
}
