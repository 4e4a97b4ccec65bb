/**
 * The read API over a real chDB store filled by the real pipeline from a simulated job (a
 * throttled GPU on rank 5, an XID on another host): every route with app.inject(), every scope
 * (401 without a token, 403 with the wrong one), validation errors, 404s, paging, and a 503 when
 * the store is closed. The OpenAPI document is checked with @apidevtools/swagger-parser.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import SwaggerParser from '@apidevtools/swagger-parser';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../core/log.js';
import { buildPipeline } from '../pipeline/build.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { ChdbStore } from '../store/chdb.js';
import { MemoryTransport } from '../stream/memory.js';
import { unreachableStore } from '../tests/helpers.js';
import { buildApp } from './app.js';
import { parseAuth } from './auth.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-api-'));
const TOKENS = {
  reader: 'reader-token-0123456789',
  ingester: 'ingest-token-0123456789',
  admin: 'admin-token-0123456789ab',
};
const as = (who: keyof typeof TOKENS) => ({ authorization: `Bearer ${TOKENS[who]}` });

const LONG_JOB_FROM = Date.now() - 301 * 86_400_000;
let store: ChdbStore;
let app: FastifyInstance;
let sim: ClusterSim;

beforeAll(async () => {
  store = new ChdbStore({ path: join(dir, 'data') });
  sim = new ClusterSim({
    ranks: 16,
    steps: 150,
    seed: 3,
    job: 'apijob',
    startTs: Date.now() - 3_600_000,
    faults: [parseFault('throttle:rank=5,at=40'), parseFault('xid:rank=12,at=100')],
  });
  const transport = new MemoryTransport({ maxQueuedBatches: 16 });
  const pipeline = buildPipeline({ transport, store });
  await pipeline.start();
  let batch = [];
  for (const e of sim.events()) {
    batch.push(e);
    if (batch.length >= 5000) {
      await transport.publish([{ key: 'apijob', events: batch }]);
      batch = [];
    }
  }
  await transport.publish([{ key: 'apijob', events: batch }]);
  // A job of 2 ranks whose steps span 300 days: small, but with room for huge replies.
  const step = [...sim.events()].find((e) => e.kind === 'step');
  const longJob = [0, 1].flatMap((rank) =>
    [LONG_JOB_FROM, LONG_JOB_FROM + 300 * 86_400_000].map((ts) => ({ ...step, job: 'longjob', rank, ts })),
  );
  await transport.publish([{ key: 'longjob', events: longJob as RankwatchEvent[] }]);
  await pipeline.stop();
  app = await buildApp({
    store,
    auth: {
      tokens: parseAuth({
        tokens: [
          { name: 'grafana', token: TOKENS.reader, scopes: ['read'] },
          { name: 'collectors', token: TOKENS.ingester, scopes: ['ingest'] },
          // Stored as its digest, as an operator keeps it off disk.
          {
            name: 'ops',
            sha256: (await import('node:crypto')).createHash('sha256').update(TOKENS.admin).digest('hex'),
            scopes: ['read', 'admin'],
          },
        ],
      }),
    },
  });
}, 120_000);

afterAll(async () => {
  await app?.close();
  await store?.close();
  rmSync(dir, { recursive: true, force: true });
});

const get = (url: string, who: keyof typeof TOKENS = 'reader', headers: Record<string, string> = {}) =>
  app.inject({ method: 'GET', url, headers: { ...as(who), ...headers } });

const throttledHost = () => sim.faults[0].host;

describe('scopes', () => {
  const routes: [string, string, 'read' | 'admin' | 'ingest'][] = [
    ['GET', '/v1/jobs', 'read'],
    ['GET', '/v1/jobs/apijob', 'read'],
    ['GET', '/v1/jobs/apijob/mfu', 'read'],
    ['GET', '/v1/jobs/apijob/steps', 'read'],
    ['GET', '/v1/jobs/apijob/heatmap', 'read'],
    ['GET', '/v1/jobs/apijob/slow-gpus', 'read'],
    ['GET', '/v1/slow-gpus', 'read'],
    ['GET', '/v1/findings', 'read'],
    ['GET', '/v1/findings/x', 'read'],
    ['POST', '/v1/findings/x/ack', 'admin'],
    ['POST', '/v1/findings/x/silence', 'admin'],
    ['GET', '/v1/nodes', 'read'],
    ['GET', '/v1/nodes/h', 'read'],
    ['GET', '/v1/cordon', 'read'],
    ['GET', '/v1/faults', 'read'],
    ['GET', '/v1/checkpoints', 'read'],
    ['GET', '/v1/failures', 'read'],
    ['GET', '/v1/jobs/apijob/checkpoint-advice', 'read'],
    ['GET', '/v1/jobs/apijob/timeline', 'read'],
    ['GET', '/v1/actions', 'read'],
    ['POST', '/v1/actions/x/approve', 'admin'],
    ['POST', '/v1/actions/x/reject', 'admin'],
    ['POST', '/v1/breaker/reset', 'admin'],
    ['POST', '/v1/nodes/h/health', 'admin'],
    ['POST', '/v1/nodes/h/repair', 'admin'],
  ];
  const wrong = { read: 'ingester', admin: 'reader', ingest: 'reader' } as const;

  it.each(routes)(
    '%s %s: 401 without a token or with an unknown one, 403 with the wrong scope',
    async (method, url, scope) => {
      const none = await app.inject({ method: method as 'GET', url });
      expect(none.statusCode).toBe(401);
      expect(none.headers['www-authenticate']).toMatch(/Bearer/);
      expect(none.json().message).toContain(scope);
      const unknown = await app.inject({
        method: method as 'GET',
        url,
        headers: { authorization: 'Bearer nope' },
      });
      expect(unknown.statusCode).toBe(401);
      const bad = await app.inject({ method: method as 'GET', url, headers: as(wrong[scope]) });
      expect(bad.statusCode).toBe(403);
      expect(bad.json().message).toMatch(new RegExp(`needs ${scope}`));
      expect(bad.json().message).not.toContain(TOKENS[wrong[scope]]);
    },
  );

  it('the routes tested here are all the /v1 routes, and a /v1 route without a scope is refused at startup', async () => {
    const doc = (await app.inject({ method: 'GET', url: '/openapi.json' })).json();
    const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(
      ([p, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`),
    );
    const tested = routes.map(
      ([m, u]) =>
        `${m} ${u.replace('/apijob', '/{job}').replace('/findings/x', '/findings/{id}').replace('/actions/x', '/actions/{id}').replace('/nodes/h', '/nodes/{host}')}`,
    );
    expect(documented.filter((r) => r.includes(' /v1/') && !r.includes('/v1/ingest')).sort()).toEqual(
      tested.sort(),
    );
    const open = await buildApp({});
    await expect(open.register(async (a) => a.get('/v1/oops', async () => 'x')).ready()).rejects.toThrow(
      /declares no scope/,
    );
  });

  it('ingest takes the ingest scope; a read-only token is refused with 403', async () => {
    const line = `${JSON.stringify({ v: 1, kind: 'fault', ts: Date.now(), host: 'h', source: 'xid', message: 'm' })}\n`;
    const app2 = await buildApp({
      store,
      publisher: { type: 'null', publish: async () => {}, close: async () => {} } as never,
      auth: {
        tokens: parseAuth({ tokens: [{ name: 'grafana', token: TOKENS.reader, scopes: ['read'] }] }),
        ingestToken: 'cli-secret',
      },
    });
    try {
      expect(
        (await app2.inject({ method: 'POST', url: '/v1/ingest', payload: line, headers: as('reader') }))
          .statusCode,
      ).toBe(403);
      // --token keeps working, for ingest and for reading.
      const cli = { authorization: 'Bearer cli-secret' };
      expect(
        (await app2.inject({ method: 'POST', url: '/v1/ingest', payload: line, headers: cli })).statusCode,
      ).toBe(200);
      expect((await app2.inject({ method: 'GET', url: '/v1/jobs', headers: cli })).statusCode).toBe(200);
      expect(
        (await app2.inject({ method: 'POST', url: '/v1/findings/x/ack', headers: cli })).statusCode,
      ).toBe(403);
    } finally {
      await app2.close();
    }
  });

  it("logs one line per request naming the token, never the token itself, and an ack's audit line says who", async () => {
    const lines: string[] = [];
    const logged = await buildApp({
      store,
      // The project's logger, writing JSON lines to the array.
      logger: createLogger('rankwatch test', { format: 'json', write: (l) => lines.push(l) }),
      auth: {
        tokens: parseAuth({ tokens: [{ name: 'ops', token: TOKENS.admin, scopes: ['read', 'admin'] }] }),
      },
    });
    try {
      const [f] = (await get('/v1/findings?limit=1')).json().findings as Finding[];
      const r = await logged.inject({
        method: 'POST',
        url: `/v1/findings/${f.id}/ack`,
        headers: as('admin'),
      });
      expect(r.statusCode).toBe(200);
      const all = lines.join('');
      expect(all).not.toContain(TOKENS.admin);
      const parsed = lines.map((l) => JSON.parse(l));
      const requests = parsed.filter((l) => l.msg === 'request');
      expect(requests).toHaveLength(1);
      expect(requests[0]).toMatchObject({
        method: 'POST',
        route: '/v1/findings/:id/ack',
        status: 200,
        token: 'ops',
        reqId: r.headers['x-request-id'],
      });
      expect(requests[0].ms).toBeGreaterThan(0);
      // A refused token is a request line too, without a name to give.
      const refused = await logged.inject({ method: 'GET', url: '/v1/jobs', headers: as('reader') });
      expect(refused.statusCode).toBe(401);
      const last = JSON.parse(lines.at(-1) ?? '{}');
      expect(last).toMatchObject({ msg: 'request', route: '/v1/jobs', status: 401 });
      expect(last.token).toBeUndefined();
      expect(lines.join('')).not.toContain(TOKENS.reader);
      expect(
        parsed.some((l) => l.audit?.action === 'ack' && l.audit.by === 'ops' && l.audit.finding === f.id),
      ).toBe(true);
    } finally {
      await logged.close();
    }
  });

  it('an auth file with a problem is refused naming the key', () => {
    expect(() => parseAuth({ tokens: [{ name: 'a', scopes: ['read'] }] })).toThrow(
      /tokens\/0: give exactly one/,
    );
    expect(() => parseAuth({ tokens: [{ name: 'a', token: 'x'.repeat(20), scopes: ['root'] }] })).toThrow(
      /scopes/,
    );
    expect(() => parseAuth({ tokens: [{ name: 'a', token: 'short', scopes: ['read'] }] })).toThrow(/token/);
  });
});

describe('jobs', () => {
  it('lists the job with its status, size, MFU and open findings', async () => {
    const r = await get('/v1/jobs');
    expect(r.statusCode).toBe(200);
    const [job] = r.json().jobs;
    expect(job).toMatchObject({ job: 'apijob', ranks: 16, world_size: 16, last_step: 149 });
    expect(job.mfu_now).toBeGreaterThan(0);
    expect(job.mfu_now).toBeLessThan(1);
    expect(job.open_findings).toBeGreaterThan(0);
    const open = (await get('/v1/findings?job=apijob&status=open&limit=1000')).json().findings;
    expect(job.open_findings).toBe(open.length);
  });

  it("a job's summary names its hosts and its findings, costliest first", async () => {
    const r = await get('/v1/jobs/apijob');
    expect(r.statusCode).toBe(200);
    const j = r.json();
    expect(j.hosts).toContain(throttledHost());
    expect(j.hosts).toHaveLength(2);
    expect(j.step_ms).toBeGreaterThan(0);
    expect(j.tokens_per_s).toBeGreaterThan(0);
    const costs = j.findings.map((f: Finding) => f.est_cost_pct ?? 0);
    expect(costs).toEqual([...costs].sort((a: number, b: number) => b - a));
    expect(
      j.findings.some((f: Finding) => f.type === 'throttle' && f.host === throttledHost() && f.rank === 5),
    ).toBe(true);
  });

  it('MFU and step series are bucketed by step', async () => {
    const fine = (await get('/v1/jobs/apijob/mfu?step=10s')).json();
    const coarse = (await get('/v1/jobs/apijob/mfu?step=5m')).json();
    expect(fine.step_s).toBe(10);
    expect(coarse.step_s).toBe(300);
    expect(fine.points.length).toBeGreaterThan(coarse.points.length);
    const sum = (p: { steps: number }[]) => p.reduce((a, b) => a + b.steps, 0);
    expect(sum(fine.points)).toBe(150);
    expect(sum(coarse.points)).toBe(150);
    const steps = (await get('/v1/jobs/apijob/steps?step=60')).json();
    expect(steps.points.length).toBeGreaterThan(0);
    for (const p of steps.points) expect(p.compute_max_ms).toBeGreaterThanOrEqual(p.compute_p50_ms);
  });

  it('the heatmap shows the throttled rank above its peers', async () => {
    const r = await get('/v1/jobs/apijob/heatmap?step=1m');
    expect(r.statusCode).toBe(200);
    const cells = r.json().cells as { rank: number; rel_compute: number; minute: number }[];
    const last = Math.max(...cells.map((c) => c.minute));
    const atLast = cells.filter((c) => c.minute === last);
    const top = atLast.reduce((a, b) => (b.rel_compute > a.rel_compute ? b : a));
    expect(top.rank).toBe(5);
    expect(top.rel_compute).toBeGreaterThan(1.05);
  });

  it("lists the job's slowest GPUs, the throttled one first with what it costs, and the fleet's", async () => {
    const r = await get('/v1/jobs/apijob/slow-gpus');
    expect(r.statusCode).toBe(200);
    const { job, gpus } = r.json() as { job: string; gpus: Record<string, number | string>[] };
    expect(job).toBe('apijob');
    expect(gpus.length).toBeGreaterThan(1);
    // Rank 5 runs ~20% slow from step 40 (its clock held down): the rank the job waits for.
    expect(gpus[0]).toMatchObject({ rank: 5, host: throttledHost(), gpu: 5 });
    expect(gpus[0].slowdown_pct as number).toBeGreaterThan(10);
    expect(gpus[0].cost_pct as number).toBeGreaterThan(1);
    for (const g of gpus.slice(1)) expect(g.cost_pct as number).toBeLessThan(gpus[0].cost_pct as number);
    expect((await get('/v1/jobs/apijob/slow-gpus?limit=1')).json().gpus).toHaveLength(1);
    const fleet = (await get(`/v1/slow-gpus?from=${Date.now() - 7_200_000}`)).json().gpus as {
      host: string;
      gpu: number;
      job: string;
      jobs: number;
    }[];
    expect(fleet[0]).toMatchObject({ host: throttledHost(), gpu: 5, job: 'apijob', jobs: 1 });
    expect((await get('/v1/slow-gpus?from=0&to=1000')).json().gpus).toEqual([]);
    expect((await get('/v1/slow-gpus?limit=0')).statusCode).toBe(400);
  });

  it('a reply past 200,000 rows is a 400 that names the step that fits, and that step is taken', async () => {
    // 300 days at one-second buckets: 25.9M points; per minute for 2 ranks: 864,002 cells.
    for (const [path, step] of [
      ['/mfu', '1'],
      ['/steps', '1'],
      ['/heatmap', '1m'],
    ]) {
      const url = `/v1/jobs/longjob${path}?from=${LONG_JOB_FROM}&step=${step}`;
      const refused = await get(url);
      expect(refused.statusCode, url).toBe(400);
      const why = refused.json().message as string;
      expect(why).toMatch(
        /^querystring\/step: [\d,]+ rows.* over the 200,000 one reply holds: use step=\d+s or more/,
      );
      const fits = /use step=(\d+)s/.exec(why)?.[1];
      const taken = await get(`/v1/jobs/longjob${path}?from=${LONG_JOB_FROM}&step=${fits}`);
      expect(taken.statusCode, `${url} at step=${fits}`).toBe(200);
      const rows = taken.json().points ?? taken.json().cells;
      // No job event, so no model and no MFU; steps and cells are there.
      if (path !== '/mfu') expect(rows.length).toBeGreaterThan(0);
      expect(rows.length).toBeLessThanOrEqual(200_000);
    }
    // The other job's ordinary requests stay well inside it.
    expect((await get('/v1/jobs/apijob/mfu?step=1')).statusCode).toBe(200);
  });

  it('an unknown job is a 404 that names it; a bad step or time is a 400 naming the field', async () => {
    for (const path of ['', '/mfu', '/steps', '/heatmap', '/slow-gpus']) {
      const r = await get(`/v1/jobs/nojob${path}`);
      expect(r.statusCode).toBe(404);
      expect(r.json().message).toContain('"nojob"');
    }
    const step = await get('/v1/jobs/apijob/mfu?step=fast');
    expect(step.statusCode).toBe(400);
    expect(step.json().message).toMatch(/step/);
    const from = await get('/v1/jobs/apijob/mfu?from=yesterday');
    expect(from.statusCode).toBe(400);
    expect(from.json().message).toMatch(/querystring\/from/);
    const limit = await get('/v1/jobs?limit=0');
    expect(limit.statusCode).toBe(400);
    expect(limit.json().message).toMatch(/limit/);
  });

  it('out-of-range numbers are 400s naming the field, not a store outage (503) or a 500', async () => {
    for (const [url, field] of [
      ['/v1/jobs?limit=1e309', 'limit'],
      ['/v1/findings?limit=-Infinity', 'limit'],
      ['/v1/jobs?from=99999999999999999999999', 'from'],
      ['/v1/jobs/apijob/mfu?to=18446744073709551616', 'to'],
      ['/v1/jobs/apijob/steps?step=4294967296', 'step'],
      ['/v1/jobs/apijob/mfu?step=0.5', 'step'],
      ['/v1/failures?since=99999999999d', 'since'],
      ['/v1/failures?gpus=1e309', 'gpus'],
      ['/v1/failures?gpus=99999999999', 'gpus'],
      ['/v1/jobs/apijob/checkpoint-advice?mtbf_h=1e309', 'mtbf_h'],
      ['/v1/jobs/apijob/checkpoint-advice?max_loss_pct=101', 'max_loss_pct'],
      [`/v1/findings?cursor=${Buffer.from('[1e300,"x"]').toString('base64url')}`, 'cursor'],
    ]) {
      const r = await get(url);
      expect(r.statusCode, url).toBe(400);
      expect(r.json().message, url).toContain(field);
    }
  });

  it('a 500 carries the request id its logged details are under', async () => {
    const lines: string[] = [];
    const broken = await buildApp({
      // A store whose reads fail with something that is neither an outage nor a RankwatchError: a bug.
      store: { ...store, type: 'chdb', query: async () => JSON.parse('{') } as never,
      logger: createLogger('rankwatch test', { format: 'json', write: (l) => lines.push(l) }),
    });
    try {
      const r = await broken.inject({ method: 'GET', url: '/v1/nodes' });
      expect(r.statusCode).toBe(500);
      const id = r.json().request_id;
      expect(id).toMatch(/^[\w-]{8,}$/);
      expect(r.headers['x-request-id']).toBe(id);
      expect(r.json().message).toBe(`internal error; the server log has the details under request id ${id}`);
      const logged = lines.map((l) => JSON.parse(l)).filter((l) => l.reqId === id);
      const failed = logged.find((l) => l.level === 'error');
      expect(failed?.err?.message).toMatch(/JSON/);
      expect(failed?.err?.stack).toContain('at ');
      expect(logged.find((l) => l.msg === 'request')).toMatchObject({ route: '/v1/nodes', status: 500 });
    } finally {
      await broken.close();
    }
  });
});

describe('job timeline', () => {
  it("marks the job's checkpoint saves (one per save, not per rank) and its lifecycle; an unknown job is a 404", async () => {
    const r = await get('/v1/jobs/apijob/timeline');
    expect(r.statusCode).toBe(200);
    const t = r.json();
    // The simulator saves every 100 steps: 150 steps make one save, reported by all 16 ranks.
    expect(t.saves.map((s: { step: number }) => s.step)).toEqual([100]);
    expect(t.saves[0].ok).toBe(true);
    expect(t.saves[0].dur_ms).toBeGreaterThan(0);
    expect(t.lifecycle.map((l: { event: string }) => l.event)).toContain('start');
    expect(t.interruptions).toEqual([]);
    const none = await get('/v1/jobs/nope/timeline');
    expect(none.statusCode).toBe(404);
    expect(none.json().message).toMatch(/no job "nope"/);
  });
});

describe('findings', () => {
  it('filters by job, host, type, status and severity', async () => {
    const all = (await get('/v1/findings?job=apijob&limit=1000')).json().findings as Finding[];
    expect(all.length).toBeGreaterThan(0);
    const host = throttledHost();
    const onHost = (await get(`/v1/findings?host=${host}`)).json().findings as Finding[];
    expect(onHost.length).toBeGreaterThan(0);
    expect(onHost.every((f) => f.host === host)).toBe(true);
    const throttles = (await get('/v1/findings?type=throttle')).json().findings as Finding[];
    expect(throttles.length).toBeGreaterThan(0);
    expect(throttles.every((f) => f.type === 'throttle')).toBe(true);
    const open = (await get('/v1/findings?status=open')).json().findings as Finding[];
    expect(open.every((f) => f.state !== 'resolved')).toBe(true);
    const sev = all[0].severity;
    const bySev = (await get(`/v1/findings?severity=${sev}`)).json().findings as Finding[];
    expect(bySev.length).toBe(all.filter((f) => f.severity === sev).length);
    const none = (await get('/v1/findings?job=apijob&to=1000')).json().findings;
    expect(none).toEqual([]);
  });

  it('pages with a cursor: every incident once, in the same order as one big page', async () => {
    const all = (await get('/v1/findings?limit=1000')).json().findings as Finding[];
    expect(all.length).toBeGreaterThanOrEqual(2);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const r = await get(`/v1/findings?limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      expect(r.statusCode).toBe(200);
      const page = r.json();
      seen.push(...page.findings.map((f: Finding) => f.id));
      cursor = page.next_cursor;
    } while (cursor && seen.length <= all.length);
    expect(seen).toEqual(all.map((f) => f.id));
  });

  it('bad filters and cursors are 400 naming the field', async () => {
    for (const [q, field] of [
      ['type=gremlin', 'type'],
      ['status=maybe', 'status'],
      ['severity=loud', 'severity'],
      ['limit=5000', 'limit'],
      ['cursor=not-a-cursor', 'cursor'],
      ['from=soon', 'from'],
    ]) {
      const r = await get(`/v1/findings?${q}`);
      expect(r.statusCode, q).toBe(400);
      expect(r.json().message, q).toContain(field);
    }
  });

  it("one finding's history runs from open through its updates, each with evidence", async () => {
    const [f] = (await get('/v1/findings?type=throttle')).json().findings as Finding[];
    const r = await get(`/v1/findings/${f.id}`);
    expect(r.statusCode).toBe(200);
    const { history, finding } = r.json();
    expect(history[0].state).toBe('open');
    expect(finding.id).toBe(f.id);
    for (const h of history) {
      expect(h.id).toBe(f.id);
      expect(Object.keys(h.evidence).length).toBeGreaterThan(0);
    }
    const missing = await get('/v1/findings/no-such-id');
    expect(missing.statusCode).toBe(404);
    expect(missing.json().message).toContain('"no-such-id"');
  });

  it('ack and silence are stored with the token name, shown on the finding, and 404 for unknown ids', async () => {
    const [f] = (await get('/v1/findings?type=throttle')).json().findings as Finding[];
    const ack = await app.inject({
      method: 'POST',
      url: `/v1/findings/${f.id}/ack`,
      headers: as('admin'),
      payload: { note: 'replacing the fan' },
    });
    expect(ack.statusCode).toBe(200);
    expect(ack.json()).toMatchObject({ by: 'ops', action: 'ack', note: 'replacing the fan' });
    const silence = await app.inject({
      method: 'POST',
      url: `/v1/findings/${f.id}/silence`,
      headers: as('admin'),
      payload: { for: '2h' },
    });
    expect(silence.statusCode).toBe(200);
    expect(silence.json().until).toBeGreaterThan(Date.now() + 7_000_000);
    const after = (await get(`/v1/findings/${f.id}`)).json();
    expect(after.finding.acked_by).toBe('ops');
    expect(after.finding.silenced_until).toBe(silence.json().until);
    expect(after.acks.map((a: { action: string }) => a.action)).toEqual(['ack', 'silence']);
    const bad = await app.inject({
      method: 'POST',
      url: `/v1/findings/${f.id}/silence`,
      headers: as('admin'),
      payload: { for: 'ever' },
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().message).toMatch(/body\/for/);
    const unknown = await app.inject({ method: 'POST', url: '/v1/findings/nope/ack', headers: as('admin') });
    expect(unknown.statusCode).toBe(404);
  });
});

describe('nodes, cordon, faults, checkpoints', () => {
  it('lists nodes and shows one with its faults, findings and throttling history', async () => {
    const nodes = (await get('/v1/nodes')).json().nodes as { host: string; throttled_gpu_minutes: number }[];
    expect(nodes.map((n) => n.host)).toContain(throttledHost());
    const r = await get(`/v1/nodes/${throttledHost()}`);
    expect(r.statusCode).toBe(200);
    const n = r.json();
    expect(n.node.throttled_gpu_minutes).toBeGreaterThan(0);
    expect(n.gpu_history.some((g: { throttled_samples: number }) => g.throttled_samples > 0)).toBe(true);
    expect(n.findings.some((f: Finding) => f.type === 'throttle')).toBe(true);
    const xidHost = sim.faults[1].host;
    const x = (await get(`/v1/nodes/${xidHost}`)).json();
    expect(x.faults.some((f: { source: string }) => f.source === 'xid')).toBe(true);
    const missing = await get('/v1/nodes/no-such-host');
    expect(missing.statusCode).toBe(404);
    expect(missing.json().message).toContain('"no-such-host"');
  });

  it('the cordon list is the same in JSON and as one host per line', async () => {
    const json = (await get('/v1/cordon')).json().hosts as { host: string; action: string }[];
    for (const h of json) expect(['cordon', 'drain', 'rma']).toContain(h.action);
    const text = await get('/v1/cordon', 'reader', { accept: 'text/plain' });
    expect(text.headers['content-type']).toMatch(/text\/plain/);
    expect(text.body).toBe(json.map((h) => `${h.host}\n`).join(''));
    const nodes = (await get('/v1/nodes')).json().nodes as { host: string; worst_action: string }[];
    expect(json.map((h) => h.host)).toEqual(
      nodes.filter((n) => ['cordon', 'drain', 'rma'].includes(n.worst_action)).map((n) => n.host),
    );
  });

  it('faults filter by host and job; checkpoints answer per job', async () => {
    const all = (await get('/v1/faults')).json().faults as { host: string }[];
    expect(all.length).toBeGreaterThan(0);
    const xidHost = sim.faults[1].host;
    const mine = (await get(`/v1/faults?host=${xidHost}&job=apijob`)).json().faults as { host: string }[];
    expect(mine.length).toBeGreaterThan(0);
    expect(mine.every((f) => f.host === xidHost)).toBe(true);
    const cp = await get('/v1/checkpoints?job=apijob');
    expect(cp.statusCode).toBe(200);
    expect(Array.isArray(cp.json().checkpoints)).toBe(true);
  });
});

describe('documents and errors', () => {
  it('/openapi.json is a valid OpenAPI document covering every route, and /docs serves a page', async () => {
    const r = await app.inject({ method: 'GET', url: '/openapi.json' });
    expect(r.statusCode).toBe(200);
    const doc = r.json();
    await SwaggerParser.validate(structuredClone(doc));
    for (const p of [
      '/v1/jobs',
      '/v1/jobs/{job}/heatmap',
      '/v1/jobs/{job}/slow-gpus',
      '/v1/slow-gpus',
      '/v1/findings/{id}/silence',
      '/v1/cordon',
      '/v1/checkpoints',
      '/v1/failures',
      '/v1/jobs/{job}/checkpoint-advice',
      '/v1/actions/{id}/approve',
      '/v1/nodes/{host}/repair',
    ])
      expect(Object.keys(doc.paths)).toContain(p);
    expect(doc.paths['/v1/findings/{id}/ack'].post.security).toEqual([{ bearer: [] }]);
    const page = await app.inject({ method: 'GET', url: '/docs/' });
    expect(page.statusCode).toBe(200);
    expect(page.body).toMatch(/<html/i);
  });

  it('a body over the limit says its size and the fix', async () => {
    const small = await buildApp({
      publisher: { type: 'null', publish: async () => {}, close: async () => {} } as never,
      bodyLimit: 1000,
    });
    try {
      const r = await small.inject({ method: 'POST', url: '/v1/ingest', payload: 'x'.repeat(2000) });
      expect(r.statusCode).toBe(413);
      expect(r.json().message).toMatch(/1000 byte limit: gzip it or split it/);
    } finally {
      await small.close();
    }
  });

  it('ingest is rate limited per client, with a 429 that says what to do', async () => {
    const limited = await buildApp({
      publisher: { type: 'null', publish: async () => {}, close: async () => {} } as never,
      ingestRatePerSecond: 1,
    });
    try {
      const line = `${JSON.stringify({ v: 1, kind: 'fault', ts: Date.now(), host: 'h', source: 'xid', message: 'm' })}\n`;
      const codes: number[] = [];
      for (let i = 0; i < 12; i++)
        codes.push((await limited.inject({ method: 'POST', url: '/v1/ingest', payload: line })).statusCode);
      expect(codes.slice(0, 10)).toEqual(Array(10).fill(200));
      expect(codes.slice(10)).toEqual([429, 429]);
      const r = await limited.inject({ method: 'POST', url: '/v1/ingest', payload: line });
      expect(r.json().message).toMatch(/over 1 requests\/s from this client: send more events per request/);
      // Another client (another address) has its own allowance.
      const other = await limited.inject({
        method: 'POST',
        url: '/v1/ingest',
        payload: line,
        remoteAddress: '10.0.0.9',
      });
      expect(other.statusCode).toBe(200);
    } finally {
      await limited.close();
    }
  });

  it('CORS is off: no Access-Control-Allow-Origin on a cross-origin request', async () => {
    const r = await get('/v1/jobs', 'reader', { origin: 'https://evil.example' });
    expect(r.statusCode).toBe(200);
    expect(r.headers['access-control-allow-origin']).toBeUndefined();
  });

  it('a store that is down answers 503 with the reason', async () => {
    const down = await buildApp({ store: unreachableStore() });
    try {
      const r = await down.inject({ method: 'GET', url: '/v1/jobs' });
      expect(r.statusCode).toBe(503);
      expect(r.json().message).toMatch(/store unavailable: ClickHouse at http:\/\/ch:8123 refused/);
    } finally {
      await down.close();
    }
  });
});
