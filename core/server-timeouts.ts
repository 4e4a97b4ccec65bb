/**
 * How long every rankwatch HTTP server waits on a client (docs/operations.md): the API of `up` and
 * `serve` (fastify, api/app.ts), the health port of `detect` (fastify) and the collector's local
 * port (node:http, collectors/health.ts). A client that dribbles its headers (slowloris: no token
 * needed) or its body is cut off, with 408, once its time is up.
 */
import type { ServerOptions } from 'node:http';

export interface ServerTimeouts {
  /** The request line and headers, complete. */
  headersMs: number;
  /** The whole request, body included (32 MiB in 120 s is 270 KB/s). */
  requestMs: number;
  /** An idle keep-alive connection between requests: above the 60 s idle timeout of common load balancers. */
  keepAliveMs: number;
  /** A connection with no byte in either direction (a client that stopped reading its reply). */
  idleMs: number;
  /** How often the headers and request timeouts are checked (Node's connectionsCheckingInterval). */
  checkMs: number;
}

export const SERVER_TIMEOUTS: ServerTimeouts = {
  headersMs: 15_000,
  requestMs: 120_000,
  keepAliveMs: 72_000,
  idleMs: 600_000,
  checkMs: 1_000,
};

/** Options of node's http.createServer for these timeouts; the idle one is `server.timeout`. */
export function httpServerTimeouts(t: ServerTimeouts = SERVER_TIMEOUTS): ServerOptions {
  return {
    headersTimeout: t.headersMs,
    requestTimeout: t.requestMs,
    keepAliveTimeout: t.keepAliveMs,
    connectionsCheckingInterval: t.checkMs,
  };
}

/** The same as fastify's server options. */
export function fastifyTimeouts(t: ServerTimeouts = SERVER_TIMEOUTS) {
  return {
    http: {
      headersTimeout: t.headersMs,
      requestTimeout: t.requestMs,
      connectionsCheckingInterval: t.checkMs,
    },
    requestTimeout: t.requestMs,
    keepAliveTimeout: t.keepAliveMs,
    connectionTimeout: t.idleMs,
  };
}
