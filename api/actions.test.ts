/**
 * The automation's admin routes over a real chDB store and a real Automation: a dry-run one (as
 * `rankwatch up` runs by default) and one in approval mode whose driver is an in-memory scheduler
 * (a real implementation of the driver interface). Actors are token names; 401/403 per route;
 * 404 for unknown actions and hosts; 409 without automation or outside approval mode; 400s name
 * the field.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Automation } from '../actions/automation.js';
import { MemoryDriver } from '../actions/drivers/memory.js';
import { safetyConfig } from '../actions/governor.js';
import { buildPipeline } from '../pipeline/build.js';
import { ChdbStore } from '../store/chdb.js';
import { MemoryTransport } from '../stream/memory.js';
import { xidFinding as xid } from '../tests/helpers.js';
import { buildApp } from './app.js';
import { parseAuth } from './auth.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-actions-api-'));
const TOKENS = { reader: 'reader-token-0123456789', admin: 'admin-token-0123456789ab' };
const tokens = () =>
  parseAuth({
    tokens: [
      { name: 'grafana', token: TOKENS.reader, scopes: ['read'] },
      { name: 'oncall-alice', token: TOKENS.admin, scopes: ['read', 'admin'] },
    ],
  });
const as = (who: keyof typeof TOKENS) => ({ authorization: `Bearer ${TOKENS[who]}` });

const gpuSample = (host: string) => ({
  v: 1 as const,
  kind: 'gpu' as const,
  ts: Date.now(),
  host,
  gpu: 0,
  sm_clock_mhz: 1980,
  throttle_reasons: 0,
});

let store: ChdbStore;
let dry: Automation;
let approval: Automation;
let scheduler: MemoryDriver;
let app: FastifyInstance;
let approvalApp: FastifyInstance;
let bare: FastifyInstance;

beforeAll(async () => {
  store = new ChdbStore({ path: join(dir, 'data') });
  // A host the store knows from a fault, that the automation has not seen.
  const transport = new MemoryTransport({ maxQueuedBatches: 4 });
  const pipeline = buildPipeline({ transport, store });
  await pipeline.start();
  await transport.publish([
    {
      key: 'k',
      events: [
        {
          v: 1,
          kind: 'fault',
          ts: Date.now(),
          host: 'stored-only',
          source: 'xid',
          code: '13',
          message: 'Xid 13',
        },
      ],
    },
  ]);
  await pipeline.stop();
  const record = (b: Parameters<ChdbStore['insert']>[0]) => store.insert(b);
  dry = new Automation({ safety: safetyConfig({}), fleetSize: () => 64, record });
  scheduler = new MemoryDriver();
  approval = new Automation({
    driver: scheduler,
    safety: safetyConfig({ enabled: true, approval: true, maxShare: 0.1, maxNodes: 4, perHour: 10 }),
    fleetSize: () => 64,
    record,
    attempts: 1,
    baseDelayMs: 1,
  });
  app = await buildApp({ store, automation: dry, auth: { tokens: tokens() } });
  approvalApp = await buildApp({ store, automation: approval, auth: { tokens: tokens() } });
  bare = await buildApp({ store, auth: { tokens: tokens() } });
}, 120_000);

afterAll(async () => {
  await Promise.all([app?.close(), approvalApp?.close(), bare?.close()]);
  await store?.close();
  rmSync(dir, { recursive: true, force: true });
});

const post = (a: FastifyInstance, url: string, payload?: object, who: keyof typeof TOKENS = 'admin') =>
  a.inject({ method: 'POST', url, headers: as(who), ...(payload ? { payload } : {}) });

describe('scopes', () => {
  it.each([
    ['POST', '/v1/actions/a/approve', 'admin'],
    ['POST', '/v1/actions/a/reject', 'admin'],
    ['POST', '/v1/breaker/reset', 'admin'],
    ['POST', '/v1/nodes/h/health', 'admin'],
    ['POST', '/v1/nodes/h/repair', 'admin'],
    ['GET', '/v1/actions', 'read'],
  ] as const)('%s %s: 401 without a token, 403 without the %s scope', async (method, url, scope) => {
    const none = await app.inject({ method, url });
    expect(none.statusCode).toBe(401);
    if (scope === 'admin') {
      const reader = await app.inject({ method, url, headers: as('reader') });
      expect(reader.statusCode).toBe(403);
      expect(reader.json().message).toMatch(/needs admin/);
    } else expect((await app.inject({ method, url, headers: as('reader') })).statusCode).toBe(200);
  });
});

describe('dry-run automation', () => {
  it('an Xid 79 is a dry-run cordon in the audit, listed by GET /v1/actions', async () => {
    dry.onEvents([gpuSample('gpu-0001'), gpuSample('gpu-0002')]);
    dry.onFindings([xid('gpu-0001')]);
    await dry.idle();
    const r = await app.inject({ method: 'GET', url: '/v1/actions?host=gpu-0001', headers: as('reader') });
    expect(r.statusCode).toBe(200);
    const body = r.json();
    expect(body).toMatchObject({ mode: 'dry_run', driver: 'none', breaker_tripped: false, pending: [] });
    expect(body.nodes).toEqual([
      {
        host: 'gpu-0001',
        state: 'cordoned',
        needs_human: false,
        out_by_rankwatch: false,
        dry_run_out: true,
        pending_approval: false,
        since: expect.any(Number),
        reason: 'xid asks for drain: gpu-0001/0: XID 79',
      },
    ]);
    expect(body.audit).toContainEqual(
      expect.objectContaining({ host: 'gpu-0001', verb: 'cordon', outcome: 'dry_run', actor: 'rankwatch' }),
    );
  });

  it('approve and reject say that cordons wait for a person only in approval mode (409)', async () => {
    for (const verb of ['approve', 'reject']) {
      const r = await post(app, `/v1/actions/act-x/${verb}`);
      expect(r.statusCode).toBe(409);
      expect(r.json().message).toMatch(/dry_run.*--cordon-approval/);
    }
  });

  it('a repair starts and finishes, then an override returns the host; each move names the token', async () => {
    const start = await post(app, '/v1/nodes/gpu-0001/repair', { phase: 'start' });
    expect(start.statusCode).toBe(200);
    expect(start.json().transitions).toContainEqual(
      expect.objectContaining({ from: 'cordoned', to: 'repairing', actor: 'oncall-alice' }),
    );
    const again = await post(app, '/v1/nodes/gpu-0001/repair', { phase: 'start' });
    expect(again.statusCode).toBe(409);
    expect(again.json().message).toMatch(/is repairing: a repair starts from cordoned/);
    const finish = await post(app, '/v1/nodes/gpu-0001/repair', { phase: 'finish' });
    expect(finish.json().transitions).toContainEqual(
      expect.objectContaining({ from: 'repairing', to: 'verifying', actor: 'oncall-alice' }),
    );
    const back = await post(app, '/v1/nodes/gpu-0001/health', { to: 'healthy', reason: 'GPU swapped' });
    expect(back.statusCode).toBe(200);
    expect(back.json().transitions).toContainEqual(
      expect.objectContaining({ host: 'gpu-0001', to: 'healthy', actor: 'oncall-alice' }),
    );
    expect(dry.health.state('gpu-0001')).toBe('healthy');
    await dry.idle();
    const audit = (await app.inject({ method: 'GET', url: '/v1/actions', headers: as('reader') })).json()
      .audit as { verb: string; actor: string; host: string }[];
    expect(audit).toContainEqual(
      expect.objectContaining({ host: 'gpu-0001', verb: 'uncordon', actor: 'oncall-alice' }),
    );
  });

  it('overrides one GPU; a host known only to the store is accepted; an unknown host is a 404', async () => {
    const g = await post(app, '/v1/nodes/gpu-0002/health', { to: 'suspect', reason: 'fans', gpu: 3 });
    expect(g.statusCode).toBe(200);
    expect(g.json().transitions).toContainEqual(expect.objectContaining({ gpu: 3, to: 'suspect' }));
    const stored = await post(app, '/v1/nodes/stored-only/health', { to: 'cordoned', reason: 'bad PSU' });
    expect(stored.statusCode).toBe(200);
    const unknown = await post(app, '/v1/nodes/nope/repair', { phase: 'start' });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().message).toMatch(/no host "nope".*GET \/v1\/nodes/);
  });

  it('a bad body is a 400 naming the field', async () => {
    const cases: [string, object, RegExp][] = [
      ['/v1/nodes/gpu-0002/health', { to: 'fine', reason: 'x' }, /body\/to/],
      ['/v1/nodes/gpu-0002/health', { to: 'healthy' }, /reason/],
      ['/v1/nodes/gpu-0002/health', { to: 'healthy', reason: 'x', gpu: -1 }, /body\/gpu/],
      ['/v1/nodes/gpu-0002/repair', { phase: 'later' }, /body\/phase/],
    ];
    for (const [url, body, msg] of cases) {
      const r = await post(app, url, body);
      expect(r.statusCode, JSON.stringify(body)).toBe(400);
      expect(r.json().message).toMatch(msg);
    }
  });

  it('the breaker reset is audited with the token name', async () => {
    const r = await post(app, '/v1/breaker/reset');
    expect(r.statusCode).toBe(200);
    expect(r.json()).toMatchObject({
      verb: 'breaker_reset',
      actor: 'oncall-alice',
      reason: 'breaker was not tripped',
    });
  });
});

describe('approval mode', () => {
  it('a cordon waits for a person; approve drains it in the name of the token; unknown ids are 404', async () => {
    approval.onEvents([gpuSample('gpu-0009'), gpuSample('gpu-0010')]);
    approval.onFindings([xid('gpu-0009'), xid('gpu-0010')]);
    await approval.idle();
    const list = (
      await approvalApp.inject({ method: 'GET', url: '/v1/actions', headers: as('reader') })
    ).json();
    expect(list.mode).toBe('approval');
    expect(list.pending.map((p: { host: string }) => p.host).sort()).toEqual(['gpu-0009', 'gpu-0010']);
    const [a, b] = list.pending as { id: string; host: string }[];
    const ok = await post(approvalApp, `/v1/actions/${a.id}/approve`);
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toMatchObject({ id: a.id, host: a.host, outcome: 'done', actor: 'oncall-alice' });
    expect(scheduler.out.get(a.host)).toMatch(/^rankwatch:/);
    const no = await post(approvalApp, `/v1/actions/${b.id}/reject`);
    expect(no.json()).toMatchObject({
      outcome: 'refused',
      actor: 'oncall-alice',
      reason: 'rejected by a person',
    });
    expect(scheduler.out.has(b.host)).toBe(false);
    const gone = await post(approvalApp, `/v1/actions/${b.id}/approve`);
    expect(gone.statusCode).toBe(404);
    expect(gone.json().message).toMatch(/no pending action/);
  });
});

describe('without automation (rankwatch serve)', () => {
  it('every POST is a 409 saying where it runs; GET /v1/actions still shows the stored audit', async () => {
    for (const [url, body] of [
      ['/v1/actions/a/approve', undefined],
      ['/v1/breaker/reset', undefined],
      ['/v1/nodes/gpu-0001/repair', { phase: 'start' }],
    ] as const) {
      const r = await post(bare, url, body);
      expect(r.statusCode).toBe(409);
      expect(r.json().message).toMatch(/not running in this server.*rankwatch up.*--cordon-enable/);
    }
    const r = await bare.inject({ method: 'GET', url: '/v1/actions', headers: as('reader') });
    expect(r.json()).toMatchObject({ mode: 'off', pending: [] });
    expect(r.json().audit.length).toBeGreaterThan(0);
  });
});
