import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { Finding } from '../schema/finding.js';
import type { DeadLetter } from '../store/rows.js';
import { Alerting } from './alerting.js';
import { sign, WebhookSink } from './webhook.js';

const f: Finding = {
  id: 'throttle-1',
  ts: 1_000,
  type: 'throttle',
  state: 'open',
  host: 'gpu-0003',
  gpu: 1,
  severity: 'warning',
  evidence: {},
  action: 'cordon',
  summary: 'gpu-0003/1 is thermally throttled',
};

interface Got {
  headers: IncomingMessage['headers'];
  body: string;
}
let server: Server | undefined;
afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

/** A receiver on loopback that answers each request with the next status of `statuses` (then 200). */
async function receiver(statuses: number[] = []): Promise<{ url: string; got: Got[] }> {
  const got: Got[] = [];
  server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      res.statusCode = statuses.shift() ?? 200;
      res.end();
    });
  });
  await new Promise<void>((r) => server?.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, got };
}

describe('webhook sink', () => {
  it('posts the finding as JSON with an HMAC-SHA256 signature over timestamp and body', async () => {
    const { url, got } = await receiver();
    const w = new WebhookSink({ url, secret: 's3cret' });
    w.send(f);
    await w.flushed();
    expect(got).toHaveLength(1);
    expect(JSON.parse(got[0].body)).toEqual({ version: 1, finding: f });
    const ts = String(got[0].headers['x-rankwatch-timestamp']);
    expect(got[0].headers['x-rankwatch-signature']).toBe(sign('s3cret', ts, got[0].body));
    // What a receiver computes with its own HMAC: a wrong secret does not match.
    expect(got[0].headers['x-rankwatch-signature']).not.toBe(sign('other', ts, got[0].body));
  });

  it('retries a receiver that fails, then delivers', async () => {
    const { url, got } = await receiver([503, 502]);
    const w = new WebhookSink({ url, baseDelayMs: 10 });
    w.send(f);
    await w.flushed();
    expect(got).toHaveLength(3);
    expect(w.stats()).toMatchObject({ sent: 1, failed: 0, dead_lettered: 0 });
  });

  it('dead-letters after N failures with the reason; a 4xx is not retried', async () => {
    const { url, got } = await receiver([500, 500, 500, 400]);
    const dead: DeadLetter[] = [];
    const w = new WebhookSink({ url, attempts: 3, baseDelayMs: 10 }, (d) => dead.push(d));
    w.send(f);
    w.send({ ...f, id: 'throttle-2' });
    await w.flushed();
    expect(got).toHaveLength(4);
    expect(dead.map((d) => d.reason)).toEqual([
      expect.stringMatching(/after 3 attempts: .* answered 500/),
      expect.stringMatching(/after 1 attempt: .* answered 400/),
    ]);
    expect(JSON.parse(dead[0].raw).finding.id).toBe('throttle-1');
    expect(dead[0].source).toBe('webhook:webhook');
    expect(w.stats()).toMatchObject({ sent: 0, failed: 2, dead_lettered: 2 });
  });
});

describe('routing', () => {
  it('sends by type and severity; a resolve follows its open to every sink', async () => {
    const a1 = await receiver();
    const server1 = server;
    const a2 = await receiver();
    const alerting = new Alerting({
      webhooks: [
        { name: 'pager', url: a1.url },
        { name: 'chat', url: a2.url },
      ],
      routes: [
        { severities: ['critical'], sinks: ['pager', 'chat'] },
        { types: ['throttle'], sinks: ['chat'] },
        { sinks: [] },
      ],
    });
    alerting.onFindings([
      f,
      { ...f, id: 'xid-1', type: 'xid', severity: 'critical' },
      { ...f, id: 'straggler-1', type: 'straggler' },
    ]);
    await alerting.flushed();
    const ids = (g: Got[]) => g.map((x) => JSON.parse(x.body).finding.id);
    expect(ids(a1.got)).toEqual(['xid-1']);
    expect(ids(a2.got)).toEqual(['throttle-1', 'xid-1']);
    expect(alerting.stats()).toMatchObject({ routed: 2, unrouted: 1 });
    await new Promise<void>((r) => server1?.close(() => r()));
  });
});
