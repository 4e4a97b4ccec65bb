/**
 * No Kubernetes API server can be installed here: the driver is tested against a fixture that
 * holds Node objects and checks every request against the API's shape (method, path, bearer
 * token, merge-patch content type, resourceVersion, the fields a patch may touch, taint shape),
 * applying patches with RFC 7386 semantics as the API server does.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ANNOTATION_FINDING, KubernetesDriver, MERGE_PATCH } from './kubernetes.js';

type Json = Record<string, unknown>;
const nodes = new Map<string, Json>();
const problems: string[] = [];
let version = 100;
let server: Server;
let api = '';

function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return patch;
  const out: Json =
    typeof target === 'object' && target !== null && !Array.isArray(target) ? { ...(target as Json) } : {};
  for (const [k, v] of Object.entries(patch as Json)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

function checkPatch(body: Json): string | undefined {
  const allowed = {
    metadata: ['resourceVersion', 'annotations'],
    spec: ['unschedulable', 'taints'],
  } as Record<string, string[]>;
  for (const [k, v] of Object.entries(body)) {
    if (!allowed[k]) return `patch touches ${k}`;
    for (const f of Object.keys(v as Json)) if (!allowed[k].includes(f)) return `patch touches ${k}.${f}`;
  }
  const taints = (body.spec as Json | undefined)?.taints;
  if (taints !== undefined && taints !== null) {
    if (!Array.isArray(taints)) return 'taints is not a list';
    for (const t of taints as Json[]) {
      if (
        typeof t.key !== 'string' ||
        !/^([a-z0-9.-]+\/)?[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$/.test(t.key)
      )
        return `bad taint key ${t.key}`;
      if (!['NoSchedule', 'PreferNoSchedule', 'NoExecute'].includes(t.effect as string))
        return `bad taint effect ${t.effect}`;
    }
  }
  const u = (body.spec as Json | undefined)?.unschedulable;
  if (u !== undefined && u !== null && typeof u !== 'boolean') return 'unschedulable is not a boolean';
  return undefined;
}

beforeAll(async () => {
  server = createServer((req, res) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      const send = (status: number, body: unknown) => {
        res.statusCode = status;
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify(body));
      };
      const fail = (status: number, why: string) => {
        problems.push(`${req.method} ${req.url}: ${why}`);
        send(status, { kind: 'Status', apiVersion: 'v1', status: 'Failure', message: why, code: status });
      };
      if (req.headers.authorization !== 'Bearer k8s-t0ken') return fail(401, 'no bearer token');
      const list = new URL(req.url ?? '', 'http://x');
      if (list.pathname === '/api/v1/nodes') {
        // A NodeList page as the API server pages it: at most `limit` items, an opaque `continue`.
        if (req.method !== 'GET') return fail(405, `method ${req.method}`);
        const limit = Number(list.searchParams.get('limit') ?? 0);
        if (!(limit > 0)) return fail(400, 'a list without limit');
        const names = [...nodes.keys()].sort();
        const from = Number(Buffer.from(list.searchParams.get('continue') ?? 'MA', 'base64').toString());
        const page = names.slice(from, from + limit);
        const next =
          from + limit < names.length ? Buffer.from(String(from + limit)).toString('base64') : undefined;
        return send(200, {
          kind: 'NodeList',
          apiVersion: 'v1',
          metadata: { resourceVersion: String(version), ...(next ? { continue: next } : {}) },
          items: page.map((n) => nodes.get(n)),
        });
      }
      const m = /^\/api\/v1\/nodes\/([a-z0-9.-]+)$/.exec(req.url ?? '');
      if (!m) return fail(404, 'not a node path');
      const node = nodes.get(m[1]);
      if (!node) return send(404, { kind: 'Status', code: 404, message: `nodes "${m[1]}" not found` });
      if (req.method === 'GET') return send(200, node);
      if (req.method !== 'PATCH') return fail(405, `method ${req.method}`);
      if (req.headers['content-type'] !== MERGE_PATCH)
        return fail(415, `content type ${req.headers['content-type']}`);
      const body = JSON.parse(text) as Json;
      const bad = checkPatch(body);
      if (bad) return fail(422, bad);
      const rv = (body.metadata as Json | undefined)?.resourceVersion;
      if (rv !== (node.metadata as Json).resourceVersion)
        return send(409, { kind: 'Status', code: 409, message: 'the object has been modified' });
      const next = mergePatch(node, body) as Json;
      (next.metadata as Json).resourceVersion = String(++version);
      nodes.set(m[1], next);
      send(200, next);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  api = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const node = (name: string, extra: Json = {}): Json => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name, resourceVersion: String(++version), labels: { 'kubernetes.io/hostname': name } },
  spec: {
    podCIDR: '10.0.0.0/24',
    taints: [{ key: 'nvidia.com/gpu', value: 'present', effect: 'NoSchedule' }],
  },
  ...extra,
});

describe('Kubernetes cordon driver (API-shaped fixture)', () => {
  let k: KubernetesDriver;
  beforeAll(() => {
    k = new KubernetesDriver({ apiServer: api, token: 'k8s-t0ken' });
  });

  it('cordons with unschedulable, a NoSchedule taint naming the finding type and the finding id; uncordon undoes only that', async () => {
    nodes.set('gpu-0007', node('gpu-0007'));
    await k.cordon({ host: 'gpu-0007', findingId: 'xid-abc', findingType: 'xid', reason: 'xid on gpu 2' });
    const n = nodes.get('gpu-0007') as { spec: Json; metadata: { annotations: Json } };
    expect(n.spec.unschedulable).toBe(true);
    expect(n.spec.taints).toEqual([
      { key: 'nvidia.com/gpu', value: 'present', effect: 'NoSchedule' },
      { key: 'rankwatch.io/xid', value: 'true', effect: 'NoSchedule' },
    ]);
    expect(n.metadata.annotations[ANNOTATION_FINDING]).toBe('xid-abc');
    expect(await k.state('gpu-0007')).toMatchObject({ out: true, byRankwatch: true });
    await k.uncordon('gpu-0007');
    const after = nodes.get('gpu-0007') as { spec: Json; metadata: Json };
    expect(after.spec.unschedulable).toBeUndefined();
    expect(after.spec.taints).toEqual([{ key: 'nvidia.com/gpu', value: 'present', effect: 'NoSchedule' }]);
    expect(after.spec.podCIDR).toBe('10.0.0.0/24');
    expect(after.metadata.annotations).toEqual({});
    expect(problems).toEqual([]);
  });

  it('a node a person cordoned reads as out, not by rankwatch', async () => {
    nodes.set('gpu-0008', node('gpu-0008', { spec: { unschedulable: true } }));
    expect(await k.state('gpu-0008')).toEqual({ out: true, reason: undefined, byRankwatch: false });
  });

  it('lists every node page by page, each out or not and by whose hand', async () => {
    for (let i = 0; i < 1_100; i++)
      nodes.set(`bulk-${String(i).padStart(4, '0')}`, node(`bulk-${String(i).padStart(4, '0')}`));
    await k.cordon({ host: 'bulk-0700', findingId: 'xid-1', findingType: 'xid', reason: 'XID 79' });
    const listed = await k.nodes();
    for (let i = 0; i < 1_100; i++) nodes.delete(`bulk-${String(i).padStart(4, '0')}`);
    expect(listed.filter((n) => n.host.startsWith('bulk-'))).toHaveLength(1_100);
    expect(listed.filter((n) => n.out).map((n) => [n.host, n.byRankwatch])).toEqual([
      ['bulk-0700', true],
      ['gpu-0008', false],
    ]);
    expect(problems).toEqual([]);
  });

  it('a concurrent change (409) is a retriable failure; an unknown node is not', async () => {
    nodes.set('gpu-0009', node('gpu-0009'));
    const real = nodes.get('gpu-0009') as { metadata: Json };
    // Someone edits the node between rankwatch's read and its patch.
    const fetchThenBump = Object.create(k) as KubernetesDriver;
    const get = (k as unknown as { get(h: string): Promise<unknown> }).get.bind(k);
    (fetchThenBump as unknown as { get(h: string): Promise<unknown> }).get = async (h: string) => {
      const n = await get(h);
      real.metadata.resourceVersion = String(++version);
      return n;
    };
    await expect(
      fetchThenBump.cordon({ host: 'gpu-0009', findingId: 'f', findingType: 'xid', reason: 'r' }),
    ).rejects.toMatchObject({
      code: 'RANKWATCH_ERR_CORDON_FAILED',
      retriable: true,
    });
    await expect(
      k.cordon({ host: 'nope', findingId: 'f', findingType: 'xid', reason: 'r' }),
    ).rejects.toMatchObject({
      code: 'RANKWATCH_ERR_CORDON_REFUSED',
    });
  });
});
