/**
 * A fuzz of every route's parameters over a real chDB store that is up: each query, path and body
 * field of every route (read from the OpenAPI document the routes generate, so a new route or
 * parameter is fuzzed without touching this file) is given malformed, huge, negative, NaN, 1e309,
 * empty, repeated, unicode and injection-like values, one at a time, the rest of the request valid.
 * A client's mistake is never a 5xx (a 503 makes clients retry forever, a 500 blames the server);
 * a 400 names the field it refuses.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Automation } from '../actions/automation.js';
import { safetyConfig } from '../actions/governor.js';
import { buildPipeline } from '../pipeline/build.js';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { ChdbStore } from '../store/chdb.js';
import type { Store } from '../store/store.js';
import { MemoryTransport } from '../stream/memory.js';
import { buildApp } from './app.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-fuzz-'));
const JOB = 'fuzzjob';

/** Values a client may send by mistake or on purpose, as they arrive in a URL (decoded). */
const STRINGS = [
  'abc',
  '',
  ' ',
  '-1',
  '0',
  '-0',
  '1.5',
  '0.0001',
  'NaN',
  'Infinity',
  '-Infinity',
  '1e309',
  '-1e309',
  '1e308',
  '4294967296',
  '18446744073709551616',
  '99999999999999999999999',
  '9'.repeat(400),
  '-99999999999999999999',
  '0x1F',
  ' 7 ',
  'null',
  'true',
  '[]',
  '{}',
  '2026-13-45',
  '9999-12-31T23:59:59Z',
  '9999999999999',
  '253402300800000',
  '1969-12-31T23:59:59Z',
  '0001-01-01T00:00:00Z',
  '+275760-09-13T00:00:00.000Z',
  '1d',
  '0s',
  '0.5',
  '99999999999d',
  '1e308s',
  '1.0000000000000000001h',
  "' OR 1=1 --",
  '1; DROP TABLE findings',
  '{from:Int64}',
  '../../etc/passwd',
  '\u0000',
  'ジョブ🚀\u202e',
  'x'.repeat(4000),
];

/** Values as raw URL text: encodings that do not decode (a bare %, an encoded lone surrogate, overlong UTF-8). */
const RAW = ['%', '%zz', '%ED%A0%80', '%C0%AF', '%FF'];
const encoded = [...STRINGS.map(encodeURIComponent), ...RAW];
/** Values also sent twice and after a good one (each request costs store reads: a sample keeps the run short). */
const REPEATED = new Set(
  ['abc', '1e309', '-1', '99999999999999999999999', '', "' OR 1=1 --", '%FF', 'NaN'].map((v) =>
    v === '%FF' ? v : encodeURIComponent(v),
  ),
);

/** JSON body values (raw text, so 1e309 and deep nesting arrive as a client sends them), and every string above. */
const JSON_VALUES = [
  ...STRINGS.map((v) => JSON.stringify(v)),
  '"abc"',
  '""',
  '-1',
  '0',
  '0.5',
  '1e308',
  '1e309',
  '-1e309',
  '99999999999999999999999',
  'null',
  'true',
  '[]',
  '{}',
  '{"$gt":""}',
  `"${'x'.repeat(5000)}"`,
  '"\\u0000"',
  '"ジョブ🚀"',
  `${'['.repeat(2000)}${']'.repeat(2000)}`,
];

interface OpenApiParam {
  in: 'query' | 'path';
  name: string;
}
interface OpenApiOp {
  parameters?: OpenApiParam[];
  requestBody?: { content: Record<string, { schema: JsonSchema }> };
}
interface JsonSchema {
  type?: string;
  enum?: unknown[];
  pattern?: string;
  minimum?: number;
  minLength?: number;
  properties?: Record<string, JsonSchema>;
  required?: string[];
}

let store: ChdbStore;
let app: FastifyInstance;
let findingId = '';
let host = '';

beforeAll(async () => {
  store = new ChdbStore({ path: join(dir, 'data') });
  const sim = new ClusterSim({
    ranks: 8,
    steps: 60,
    seed: 5,
    job: JOB,
    startTs: Date.now() - 3_600_000,
    faults: [parseFault('throttle:rank=3,at=10'), parseFault('xid:rank=6,at=40')],
  });
  const transport = new MemoryTransport({ maxQueuedBatches: 16 });
  const pipeline = buildPipeline({ transport, store });
  await pipeline.start();
  await transport.publish([{ key: JOB, events: [...sim.events()] }]);
  await pipeline.stop();
  host = sim.faults[0].host;
  const automation = new Automation({
    safety: safetyConfig({}),
    fleetSize: () => 8,
    record: (b) => store.insert(b),
  });
  // Auth off (every route open): the fuzz is about parameters; scopes are tested in api.test.ts.
  app = await buildApp({ store, automation, publisher: new MemoryTransport({ maxQueuedBatches: 4 }) });
  const [f] = (await app.inject({ method: 'GET', url: '/v1/findings?limit=1' })).json().findings as Finding[];
  findingId = f.id;
}, 120_000);

afterAll(async () => {
  await app?.close();
  await store?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A valid value for a path parameter: something the store holds, so the handler gets past its 404. */
const validPath = (name: string): string => ({ job: JOB, host, id: findingId, file: 'app.js' })[name] ?? 'x';

/** A valid body from a route's schema: the first enum value, a duration, or a short string. */
function validBody(s: JsonSchema | undefined): Record<string, unknown> | undefined {
  if (!s?.properties) return undefined;
  const out: Record<string, unknown> = {};
  for (const k of s.required ?? []) {
    const p = s.properties[k];
    out[k] = p.enum ? p.enum[0] : p.pattern ? '1h' : p.type === 'integer' || p.type === 'number' ? 0 : 'x';
  }
  return out;
}

interface Route {
  method: string;
  path: string;
  query: string[];
  params: string[];
  body?: JsonSchema;
}

/**
 * Every route the app declares, with its parameters, from the OpenAPI document it generates. Read
 * at collection time (one test per route) from an app over a store it never queries.
 */
const ROUTES: Route[] = await (async () => {
  const unused = {} as Store;
  const a = await buildApp({ store: unused, publisher: new MemoryTransport({ maxQueuedBatches: 1 }) });
  try {
    const doc = (await a.inject({ method: 'GET', url: '/openapi.json' })).json() as {
      paths: Record<string, Record<string, OpenApiOp>>;
    };
    const out: Route[] = [];
    for (const [path, ops] of Object.entries(doc.paths))
      for (const [method, op] of Object.entries(ops))
        out.push({
          method: method.toUpperCase(),
          path,
          query: (op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name),
          params: (op.parameters ?? []).filter((p) => p.in === 'path').map((p) => p.name),
          body: op.requestBody?.content['application/json']?.schema,
        });
    // Hidden from the document (the page's files), but a route with a path parameter all the same.
    out.push({ method: 'GET', path: '/web/{file}', query: [], params: ['file'] });
    return out;
  } finally {
    await a.close();
  }
})();

/** The route's URL with its path parameters: valid ones, or the raw (encoded) values given. */
const fill = (r: Route, raw: Record<string, string> = {}) =>
  r.path.replace(/\{(\w+)\}/g, (_, name: string) => raw[name] ?? encodeURIComponent(validPath(name)));

async function send(r: Route, url: string, body?: string) {
  const payload = body ?? (r.body ? JSON.stringify(validBody(r.body)) : undefined);
  return app.inject({
    method: r.method as 'GET',
    url,
    ...(payload !== undefined ? { payload, headers: { 'content-type': 'application/json' } } : {}),
  });
}

/** Collects what went wrong, so one run lists every failing request: a 5xx, or a 400 that does not name the field. */
class Judge {
  readonly wrong: string[] = [];
  check(
    res: { statusCode: number; body: string; headers: Record<string, unknown> },
    field: string,
    what: string,
  ) {
    const named =
      res.body.includes(field) ||
      // A path that is not percent-encoded UTF-8 is refused before any route (and its fields) is known.
      res.body.includes('FST_ERR_BAD_URL');
    const json = String(res.headers['content-type'] ?? '').startsWith('application/json');
    if (res.statusCode >= 500 || (res.statusCode === 400 && field && !named))
      this.wrong.push(`${what} → ${res.statusCode} ${res.body.slice(0, 200)}`);
    else if (json && !parses(res.body))
      this.wrong.push(`${what} → ${res.statusCode} not JSON: ${res.body.slice(0, 200)}`);
  }
}

const parses = (text: string) => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};

describe('no 5xx for client mistakes in any parameter of any route', () => {
  it('the fuzz reaches every route of api/routes/, each with its parameters', () => {
    const names = ROUTES.map((r) => `${r.method} ${r.path}`);
    for (const expected of [
      'GET /v1/jobs',
      'GET /v1/jobs/{job}/mfu',
      'GET /v1/failures',
      'POST /v1/findings/{id}/silence',
      'POST /v1/nodes/{host}/health',
      'POST /v1/ingest',
      'GET /healthz',
    ])
      expect(names).toContain(expected);
    expect(ROUTES.find((r) => r.path === '/v1/failures')?.query).toEqual(
      expect.arrayContaining(['from', 'to', 'since', 'gpus']),
    );
    const health = ROUTES.find((r) => r.path === '/v1/nodes/{host}/health');
    expect(Object.keys(health?.body?.properties ?? {})).toEqual(['to', 'reason', 'gpu']);
    expect(validBody(health?.body)).toEqual({ to: 'healthy', reason: 'x' });
  });

  // Each route takes a few hundred store reads: seconds alone, minutes on a loaded machine.
  it.each(ROUTES.map((r) => [`${r.method} ${r.path}`, r] as const))(
    '%s',
    { timeout: 300_000 },
    async (_, r) => {
      const j = new Judge();
      j.check(await send(r, fill(r)), '', `${r.method} ${fill(r)} (valid)`);
      // Query parameters: each bad value alone; some twice, and after a good one (an array reaches the
      // route); and a parameter the route does not know.
      for (const q of r.query)
        for (const v of encoded) {
          const forms = REPEATED.has(v)
            ? [`${q}=${v}`, `${q}=${v}&${q}=${v}`, `${q}=1&${q}=${v}`]
            : [`${q}=${v}`];
          for (const qs of forms) {
            const url = `${fill(r)}?${qs}`;
            j.check(await send(r, url), q, `${r.method} ${url.slice(0, 200)}`);
          }
        }
      for (const v of [...REPEATED].slice(0, 3))
        j.check(await send(r, `${fill(r)}?zzz=${v}`), '', `${r.method} ?zzz=${v}`);
      for (const p of r.params)
        for (const v of encoded) {
          if (v === '') continue; // an empty segment is another route (or none): 404
          const url = fill(r, { [p]: v });
          j.check(await send(r, url), p, `${r.method} ${url.slice(0, 200)}`);
        }
      if (r.body) {
        const valid = validBody(r.body) ?? {};
        for (const k of Object.keys(r.body.properties ?? {}))
          for (const v of JSON_VALUES) {
            const body = JSON.stringify({ ...valid, [k]: 0 }).replace(`"${k}":0`, `"${k}":${v}`);
            j.check(await send(r, fill(r), body), k, `${r.method} ${r.path} ${body.slice(0, 200)}`);
          }
        for (const body of ['not json', '{', '[]', 'null', '"x"', '1e309', '{"zzz":1}'])
          j.check(await send(r, fill(r), body), '', `${r.method} ${r.path} body ${body}`);
      }
      expect(j.wrong).toEqual([]);
    },
  );
});
