/**
 * GET /v1/failures and GET /v1/jobs/{job}/checkpoint-advice over a real chDB store, filled by the
 * real pipeline from the failure simulator (what `rankwatch sim --failures` writes) and two small
 * hand-written jobs: one with saves and no failure, one with no save. Expected figures are worked
 * out here from the simulated events, not read back from the code under test.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import SwaggerParser from '@apidevtools/swagger-parser';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CAUSE_GROUPS } from '../analytics/causes.js';
import { poissonInterval } from '../analytics/poisson.js';
import { buildPipeline } from '../pipeline/build.js';
import type { RankwatchEvent } from '../schema/events.js';
import { FailureSim } from '../sim/failures.js';
import { ChdbStore } from '../store/chdb.js';
import { MemoryTransport } from '../stream/memory.js';
import { unreachableStore } from '../tests/helpers.js';
import { buildApp } from './app.js';
import { parseAuth } from './auth.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-failures-api-'));
const READER = 'reader-token-0123456789';
const INGESTER = 'ingest-token-0123456789';
// Recent times: the job's host list lives in raw events, kept 30 days by default.
const start = Date.now() - 10 * 86_400_000;
const SAVE_S = 45;
const RESTART_S = 900;
const INTERVAL_S = 1800;

let store: ChdbStore;
let app: FastifyInstance;
let fleet: RankwatchEvent[];
const tinyT = start + 600_000;

const get = (url: string, token = READER) =>
  app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}` } });

beforeAll(async () => {
  store = new ChdbStore({ path: join(dir, 'data') });
  fleet = new FailureSim({
    nodes: 32,
    days: 7,
    ratePerNodeDay: 0.05,
    seed: 4,
    startTs: start,
    intervalS: INTERVAL_S,
    saveS: SAVE_S,
    restartS: RESTART_S,
  }).events();
  const job = (id: string, extra: Record<string, unknown> = {}) => ({
    v: 1,
    kind: 'job',
    ts: tinyT,
    job: id,
    world_size: 32,
    gpu_model: 'H100-SXM',
    dtype: 'bf16',
    parallel: { tp: 8, pp: 1, dp: 4 },
    flops_per_step: 1e15,
    ...extra,
  });
  const small = [
    job('tiny', { hosts: ['t0', 't1', 't2', 't3'] }),
    { v: 1, kind: 'job_event', ts: tinyT, job: 'tiny', event: 'start' },
    // Three saves of 20 s, every 5 min of wall time, so 280 s of compute between them.
    ...[1, 2, 3].map((k) => ({
      v: 1,
      kind: 'checkpoint',
      ts: tinyT + k * 300_000,
      job: 'tiny',
      rank: 0,
      step: k * 100,
      phase: 'save',
      dur_ms: 20_000,
      ok: true,
    })),
    job('nosave'),
    { v: 1, kind: 'job_event', ts: tinyT, job: 'nosave', event: 'start' },
  ] as RankwatchEvent[];
  const transport = new MemoryTransport({ maxQueuedBatches: 16 });
  const pipeline = buildPipeline({ transport, store });
  await pipeline.start();
  await transport.publish([{ key: 'fleet-0', events: fleet }]);
  await transport.publish([{ key: 'small', events: small }]);
  await pipeline.stop();
  app = await buildApp({
    store,
    auth: {
      tokens: parseAuth({
        tokens: [
          { name: 'research', token: READER, scopes: ['read'] },
          { name: 'collectors', token: INGESTER, scopes: ['ingest'] },
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

const interruptions = () => fleet.filter((e) => e.kind === 'job_event' && e.event === 'interrupted');
const noNaN = (body: string) => expect(body).not.toMatch(/NaN|Infinity/);

describe('GET /v1/failures', () => {
  it('counts every recorded interruption, per cause and group, with intervals and the MTBF for N GPUs', async () => {
    const n = interruptions().length;
    expect(n).toBeGreaterThan(5);
    const r = await get('/v1/failures?gpus=256');
    expect(r.statusCode, r.body).toBe(200);
    const b = r.json();
    expect(b.jobs).toBe(3);
    expect(b.fleet.count).toBe(n);
    expect(b.rows.reduce((s: number, x: { count: number }) => s + x.count, 0)).toBe(n);
    // Every simulated cause named on its event is a row, with its count.
    const byCause = new Map<string, number>();
    for (const e of interruptions()) {
      const c = String((e as { cause?: string }).cause)
        .toLowerCase()
        .replace(/[^a-z0-9]+/g, '_');
      byCause.set(c, (byCause.get(c) ?? 0) + 1);
    }
    for (const [c, k] of byCause) expect(b.rows.find((x: { key: string }) => x.key === c)?.count).toBe(k);
    for (const x of b.rows) {
      expect(x.per_1k_node_days.lo).toBeLessThanOrEqual(x.per_1k_node_days.rate);
      expect(x.per_1k_node_days.hi).toBeGreaterThan(x.per_1k_node_days.rate);
      expect(x.few).toBe(x.count < 10);
    }
    // MTBF for 256 GPUs: fleet GPU-hours / (n × 256), its interval from the Poisson bounds flipped.
    const gpuH = b.fleet.gpu_hours;
    const ci = poissonInterval(n);
    expect(b.mtbf.gpus).toBe(256);
    expect(b.mtbf.hours).toBeCloseTo(gpuH / (n * 256), 6);
    expect(b.mtbf.lo).toBeCloseTo(gpuH / (ci.hi * 256), 6);
    expect(b.mtbf.hi).toBeCloseTo(gpuH / (ci.lo * 256), 6);
    // Each job's timeline comes along, with its goodput.
    const f0 = b.timelines.find((t: { job: string }) => t.job === 'fleet-0');
    expect(f0.interruptions).toHaveLength(n);
    expect(f0.ettr).toBeGreaterThan(0.5);
    expect(f0.ettr).toBeLessThan(1);
    expect(b.as_of).toBeGreaterThan(start);
  });

  it('groups, hosts and GPU models as asked; a range narrows what is counted', async () => {
    const g = (await get('/v1/failures?by=group')).json();
    expect(g.by).toBe('group');
    expect(g.rows.map((x: { key: string }) => x.key).sort()).toEqual([...CAUSE_GROUPS].sort());
    const h = (await get('/v1/failures?by=host')).json();
    // 32 fleet hosts and the tiny job's 4; each interruption on the host of its fault.
    expect(h.rows).toHaveLength(36);
    const faultHosts = new Map<string, number>();
    for (const e of fleet.filter((e) => e.kind === 'fault'))
      faultHosts.set(String(e.host), (faultHosts.get(String(e.host)) ?? 0) + 1);
    for (const [host, k] of faultHosts)
      expect(h.rows.find((x: { key: string }) => x.key === host).count).toBe(k);
    const m = (await get('/v1/failures?by=gpu_model')).json();
    expect(m.rows.map((x: { key: string }) => x.key)).toEqual(['H100-SXM']);
    // Only the first half of the week: fewer interruptions, exactly those recorded before `to`.
    const mid = start + 3.5 * 86_400_000;
    const half = (await get(`/v1/failures?to=${mid}`)).json();
    expect(half.fleet.count).toBe(interruptions().filter((e) => e.ts < mid).length);
  });

  it('refuses a bad field with a 400 that names it', async () => {
    const cases: [string, RegExp][] = [
      ['by=rack', /querystring\/by/],
      ['gpus=0', /querystring\/gpus must be >= 1/],
      ['gpus=many', /querystring\/gpus/],
      ['since=lately', /querystring\/since/],
      [`since=7d&from=${start}`, /querystring\/since: give since or from, not both/],
      ['from=yesterday', /querystring\/from/],
    ];
    for (const [q, msg] of cases) {
      const r = await get(`/v1/failures?${q}`);
      expect(r.statusCode, q).toBe(400);
      expect(r.json().message, q).toMatch(msg);
    }
  });
});

describe('GET /v1/jobs/{job}/checkpoint-advice', () => {
  it("advises from the job's own saves, restarts and interruptions, each saying where it came from", async () => {
    const r = await get('/v1/jobs/fleet-0/checkpoint-advice');
    expect(r.statusCode, r.body).toBe(200);
    const b = r.json();
    const n = interruptions().length;
    expect(b.inputs.saveS.value).toBeCloseTo(SAVE_S, 6);
    expect(b.inputs.saveS.source).toMatch(/mean of the job's \d+ successful save\(s\)/);
    expect(b.inputs.restartS.value).toBeCloseTo(RESTART_S, 6);
    expect(b.inputs.intervalS.value).toBeCloseTo(INTERVAL_S, 6);
    expect(b.inputs.mtbfS.source).toContain(`the job's own ${n} interruption(s)`);
    const M = b.timeline.up_ms / 1000 / n;
    expect(b.inputs.mtbfS.value).toBeCloseTo(M, 3);
    // Daly by hand: √(2δM)·[1 + ⅓√(δ/2M) + ⅑(δ/2M)] − δ.
    const x = SAVE_S / (2 * M);
    expect(b.advice.ok).toBe(true);
    expect(b.advice.dalyS).toBeCloseTo(
      Math.sqrt(2 * SAVE_S * M) * (1 + Math.sqrt(x) / 3 + x / 9) - SAVE_S,
      6,
    );
    expect(b.fleet).toBeNull();
    noNaN(r.body);
  });

  it('a costly interval given as an override is a checkpoint_interval finding with its cost in goodput', async () => {
    const base = (await get('/v1/jobs/fleet-0/checkpoint-advice')).json();
    const M = base.inputs.mtbfS.value;
    const r = (await get('/v1/jobs/fleet-0/checkpoint-advice?interval_s=14400')).json();
    expect(r.inputs.intervalS).toEqual({ value: 14400, source: 'the command line' });
    // Daly's complete model by hand: E(τ) = τ / (M·e^(R/M)·(e^((τ+δ)/M) − 1)).
    const E = (t: number) => t / (M * Math.exp(RESTART_S / M) * (Math.exp((t + SAVE_S) / M) - 1));
    const loss = (100 * (E(r.advice.dalyS) - E(14400))) / E(r.advice.dalyS);
    expect(loss).toBeGreaterThan(1);
    expect(r.advice.currentLossPct).toBeCloseTo(loss, 6);
    expect(r.finding.type).toBe('checkpoint_interval');
    expect(r.finding.job).toBe('fleet-0');
    expect(r.finding.est_cost_pct).toBeCloseTo(loss, 2);
    expect(r.finding.evidence.current_s).toBe(14400);
    // Under the threshold: no finding; a lower threshold makes the measured interval one.
    expect(base.advice.currentLossPct).toBeLessThan(1);
    expect(base.finding).toBeNull();
    const strict = (await get('/v1/jobs/fleet-0/checkpoint-advice?max_loss_pct=0')).json();
    expect(strict.finding?.est_cost_pct ?? 0).toBeCloseTo(base.advice.currentLossPct, 2);
  });

  it("a job with no failure of its own takes the fleet's rate for its size; with none anywhere, says what is missing", async () => {
    const r = (await get('/v1/jobs/tiny/checkpoint-advice')).json();
    expect(r.timeline.saves).toBe(3);
    expect(r.inputs.saveS.value).toBeCloseTo(20, 6);
    expect(r.inputs.intervalS.value).toBeCloseTo(280, 6);
    expect(r.inputs.mtbfS.source).toMatch(/no interruption of tiny yet: the fleet's \d+ interruption\(s\)/);
    expect(r.fleet.mtbf.gpus).toBe(32);
    expect(r.inputs.mtbfS.value / 3600).toBeCloseTo(r.fleet.mtbf.hours, 6);
    expect(r.advice.ok).toBe(true);
    // Before the fleet's first failure, nothing has failed anywhere: 200, no advice, what it needs.
    const first = Math.min(...interruptions().map((e) => e.ts));
    const before = tinyT + 3 * 300_000 + 1;
    expect(first).toBeGreaterThan(before);
    const none = await get(`/v1/jobs/tiny/checkpoint-advice?to=${before}`);
    expect(none.statusCode).toBe(200);
    const b = none.json();
    expect(b.advice).toEqual({
      ok: false,
      missing: ['failure rate'],
      needs: [expect.stringMatching(/mean time between failures/)],
    });
    expect(b.inputs.mtbfS.value).toBeUndefined();
    expect(b.inputs.mtbfS.source).toMatch(/no interruption recorded for tiny or the fleet/);
    expect(b.finding).toBeNull();
    noNaN(none.body);
    // An MTBF given with the request fills the gap.
    const given = (await get(`/v1/jobs/tiny/checkpoint-advice?to=${before}&mtbf_h=3`)).json();
    expect(given.advice.ok).toBe(true);
    expect(given.advice.mtbfS).toBe(10800);
  });

  it('a job with no save answers 200 with the save time missing, never a division by zero', async () => {
    const r = await get('/v1/jobs/nosave/checkpoint-advice');
    expect(r.statusCode).toBe(200);
    const b = r.json();
    expect(b.advice.ok).toBe(false);
    expect(b.advice.missing).toContain('save time');
    expect(b.inputs.saveS.source).toMatch(/no successful save recorded for nosave/);
    expect(b.inputs.intervalS.value).toBeUndefined();
    noNaN(r.body);
  });

  it('404 names an unknown job; 400 names a bad override', async () => {
    const r = await get('/v1/jobs/nope/checkpoint-advice');
    expect(r.statusCode).toBe(404);
    expect(r.json().message).toMatch(/no job "nope" recorded/);
    for (const [q, msg] of [
      ['save_s=-1', /querystring\/save_s must be >= 0/],
      ['mtbf_h=soon', /querystring\/mtbf_h/],
      ['max_loss_pct=-2', /querystring\/max_loss_pct/],
    ] as const) {
      const b = await get(`/v1/jobs/fleet-0/checkpoint-advice?${q}`);
      expect(b.statusCode, q).toBe(400);
      expect(b.json().message, q).toMatch(msg);
    }
  });
});

describe('scopes, documents and a store that is down', () => {
  it.each(['/v1/failures', '/v1/jobs/fleet-0/checkpoint-advice'])(
    '%s: 401 without a token, 403 with an ingest-only one',
    async (url) => {
      const none = await app.inject({ method: 'GET', url });
      expect(none.statusCode).toBe(401);
      const wrong = await get(url, INGESTER);
      expect(wrong.statusCode).toBe(403);
      expect(wrong.json().message).toMatch(/needs read/);
    },
  );

  it('both routes are in a valid OpenAPI document', async () => {
    const doc = (await app.inject({ method: 'GET', url: '/openapi.json' })).json();
    await SwaggerParser.validate(structuredClone(doc));
    expect(doc.paths['/v1/failures'].get.security).toEqual([{ bearer: [] }]);
    expect(
      doc.paths['/v1/jobs/{job}/checkpoint-advice'].get.parameters.map((p: { name: string }) => p.name),
    ).toEqual(expect.arrayContaining(['job', 'save_s', 'mtbf_h', 'restart_s', 'interval_s', 'since']));
  });

  it('503 with the reason when the store is down', async () => {
    const down = await buildApp({ store: unreachableStore() });
    try {
      for (const url of ['/v1/failures', '/v1/jobs/j/checkpoint-advice']) {
        const r = await down.inject({ method: 'GET', url });
        expect(r.statusCode, url).toBe(503);
        expect(r.json().message).toMatch(/store unavailable: ClickHouse at http:\/\/ch:8123 refused/);
      }
    } finally {
      await down.close();
    }
  });
});
