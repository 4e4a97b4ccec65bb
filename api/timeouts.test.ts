/**
 * Slow clients are cut off, on a real socket: a client that dribbles its headers (slowloris: no
 * token needed) or its body gets 408 and a closed connection, and an idle keep-alive connection is
 * closed; a client within the limits is answered. Short timeouts here; the defaults the server
 * runs with are checked on its Node server (tests/up-auth.int.test.ts dribbles against `up`).
 */
import { connect } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SERVER_TIMEOUTS } from '../core/server-timeouts.js';
import { MemoryTransport } from '../stream/memory.js';
import { slowClient } from '../tests/slow-client.js';
import { buildApp } from './app.js';

let app: FastifyInstance;
let port = 0;

beforeAll(async () => {
  app = await buildApp({
    publisher: new MemoryTransport({ maxQueuedBatches: 4 }),
    timeouts: { headersMs: 500, requestMs: 1500, keepAliveMs: 500, checkMs: 100 },
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as { port: number }).port;
});
afterAll(() => app?.close());

describe('timeouts', () => {
  it('the server runs with the documented defaults', async () => {
    const plain = await buildApp({});
    try {
      expect(plain.server.headersTimeout).toBe(SERVER_TIMEOUTS.headersMs);
      expect(plain.server.requestTimeout).toBe(SERVER_TIMEOUTS.requestMs);
      expect(plain.server.keepAliveTimeout).toBe(SERVER_TIMEOUTS.keepAliveMs);
      expect(plain.server.timeout).toBe(SERVER_TIMEOUTS.idleMs);
      expect(SERVER_TIMEOUTS).toMatchObject({ headersMs: 15_000, requestMs: 120_000, keepAliveMs: 72_000 });
    } finally {
      await plain.close();
    }
  });

  it('a connection dribbling its headers is answered 408 and closed', async () => {
    const r = await slowClient(port, 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    expect(r.closedByServer).toBe(true);
    expect(r.got).toMatch(/^HTTP\/1\.1 408 /);
  });

  it('a body dribbled slower than the request timeout allows is answered 408 and closed', async () => {
    const r = await slowClient(
      port,
      'POST /v1/ingest HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: 100000\r\n\r\n',
      ' ',
    );
    expect(r.closedByServer).toBe(true);
    expect(r.got).toMatch(/^HTTP\/1\.1 408 /);
  });

  it('an idle keep-alive connection is closed; a prompt client is answered', async () => {
    const r = await new Promise<{ got: string; closedByServer: boolean }>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      let got = '';
      const giveUp = setTimeout(() => {
        socket.destroy();
        resolve({ got, closedByServer: false });
      }, 30_000);
      socket.on('connect', () => socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'));
      socket.on('data', (d) => {
        got += d.toString();
      });
      socket.on('close', () => {
        clearTimeout(giveUp);
        resolve({ got, closedByServer: true });
      });
    });
    expect(r.got).toMatch(/^HTTP\/1\.1 200 /);
    expect(r.got).toMatch(/keep-alive/i);
    expect(r.closedByServer).toBe(true);
  });
});
