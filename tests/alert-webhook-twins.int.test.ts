/**
 * `--alert-webhook URL1,URL2` does what `rankwatch up --help` says, and RANKWATCH_ALERT_WEBHOOK the
 * same: the built CLI, started once each way (the secret given the same way), delivers the finding
 * of an Xid 79 it ingests to two real receivers on 127.0.0.1, each signed with the secret. Issue 27
 * found the flag crashing `up` at start while only the variable worked.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sign } from '../alerts/webhook.js';
import { listeningUrl, postLines, type Running, startRankwatch, until, xidFaultLine } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-webhook-twins-'));
const servers: Server[] = [];
const running: Running[] = [];

afterAll(async () => {
  for (const r of running) r.kill();
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  rmSync(dir, { recursive: true, force: true });
});

interface Delivery {
  headers: IncomingMessage['headers'];
  body: string;
}

/** A webhook receiver on loopback that keeps what it is sent and answers 200. */
async function receiver(): Promise<{ url: string; got: Delivery[] }> {
  const got: Delivery[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      res.end();
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, got };
}

/** The environment of the test run without any alerting variable, plus `extra`. */
function envWith(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('RANKWATCH_ALERT')) delete env[k];
  return { ...env, ...extra };
}

describe('alert webhooks from the flag and from the variable', () => {
  it.each([
    ['--alert-webhook URL1,URL2', 'flag'],
    ['RANKWATCH_ALERT_WEBHOOK=URL1,URL2', 'env'],
  ] as const)(
    '%s delivers a finding to both receivers, signed',
    async (_, how) => {
      const [a, b] = await Promise.all([receiver(), receiver()]);
      const hooks = `${a.url},${b.url}`;
      const secret = `s3cret-${how}`;
      const args = ['up', '--port', '0', '--data', join(dir, how)];
      const up = startRankwatch(
        how === 'flag' ? [...args, '--alert-webhook', hooks, '--alert-webhook-secret', secret] : args,
        envWith(
          how === 'env' ? { RANKWATCH_ALERT_WEBHOOK: hooks, RANKWATCH_ALERT_WEBHOOK_SECRET: secret } : {},
        ),
      );
      running.push(up);
      const url = await listeningUrl(up);
      expect(await postLines(url, [xidFaultLine(`gpu-twin-${how}`)])).toEqual([200]);
      for (const r of [a, b]) {
        const d = await until('the finding at the receiver', () => r.got[0], 60_000);
        const { finding } = JSON.parse(d.body) as { finding: { type: string; host: string } };
        expect(finding).toMatchObject({ type: 'xid', host: `gpu-twin-${how}` });
        expect(d.headers['x-rankwatch-signature']).toBe(
          sign(secret, String(d.headers['x-rankwatch-timestamp']), d.body),
        );
      }
      expect(await up.stop()).toBe(0);
    },
    240_000,
  );
});
