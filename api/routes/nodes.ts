/**
 * Machines: node health (worst first), one node's faults, findings and throttling history, the
 * cordon list (JSON, or one host per line for scripts), and the fault log.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { type TSchema, Type } from '@sinclair/typebox';
import { Finding } from '../../schema/finding.js';
import { faultHistory, gpuHistory, nodeHealth, quietNode } from '../../store/health-queries.js';
import { findings } from '../../store/queries.js';
import type { Store } from '../../store/store.js';
import { errors, notFound, parseRange, READ_ERRORS, TimeQuery } from './common.js';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);

const Node = Type.Object({
  host: Type.String(),
  faults: Type.Integer(),
  last_fault_ts: Nullable(Type.Number()),
  fault_sources: Type.Array(Type.String()),
  throttled_gpu_minutes: Type.Integer({
    description: 'GPU-minutes with HW slowdown, thermal or power-brake throttling',
  }),
  min_sm_clock_mhz: Nullable(Type.Number()),
  max_temp_c: Nullable(Type.Number()),
  ecc_dbe: Type.Integer(),
  active_findings: Type.Integer(),
  worst_action: Type.String({
    description: 'strongest action an open finding asks for: none, watch, cordon, drain, rma',
  }),
});

const Fault = Type.Object({
  ts: Type.Number(),
  host: Type.String(),
  gpu: Type.Integer(),
  job: Type.String(),
  rank: Type.Integer(),
  source: Type.String(),
  code: Type.String(),
  message: Type.String(),
});

const GpuMinute = Type.Object({
  minute: Type.Number(),
  gpu: Type.Integer(),
  sm_clock_mhz: Type.Number(),
  sm_clock_min_mhz: Type.Number(),
  temp_max_c: Type.Number(),
  throttle_reasons: Type.Integer({ description: 'NVML reason bits seen in the minute, OR-ed' }),
  throttled_samples: Type.Integer(),
});

/** `Accept: text/plain` (and not JSON first): the one-host-per-line form. */
const wantsText = (accept = '') => {
  const t = accept.indexOf('text/plain');
  const j = accept.indexOf('application/json');
  return t >= 0 && (j < 0 || t < j);
};

/** Actions that take a node out of scheduling. */
const CORDON = new Set(['cordon', 'drain', 'rma']);

export const nodeRoutes: FastifyPluginAsyncTypebox<{ store: Store }> = async (app, { store }) => {
  const config = { scope: 'read' as const };

  app.get(
    '/v1/nodes',
    {
      config,
      schema: {
        summary: 'Node health, worst first: faults, throttling and open findings per host',
        tags: ['nodes'],
        querystring: Type.Object(TimeQuery),
        response: { 200: Type.Object({ nodes: Type.Array(Node) }), ...errors(...READ_ERRORS) },
      },
    },
    async (req) => ({ nodes: await nodeHealth(store, parseRange(req.query)) }),
  );

  app.get(
    '/v1/nodes/:host',
    {
      config,
      schema: {
        summary: 'One node: its health, faults, findings and GPU throttling history',
        tags: ['nodes'],
        params: Type.Object({ host: Type.String() }),
        querystring: Type.Object(TimeQuery),
        response: {
          200: Type.Object({
            node: Node,
            faults: Type.Array(Fault),
            findings: Type.Array(Finding),
            gpu_history: Type.Array(GpuMinute, { description: 'per GPU and minute, newest first' }),
          }),
          ...errors(...READ_ERRORS, 404),
        },
      },
    },
    async (req) => {
      const { host } = req.params;
      const range = parseRange(req.query);
      const [node] = await nodeHealth(store, { ...range, host });
      const [faults, found, gpu] = await Promise.all([
        faultHistory(store, { ...range, host, limit: 200 }),
        findings(store, { ...range, host, limit: 200 }),
        gpuHistory(store, host, { ...range, limit: 1000 }),
      ]);
      if (!node && gpu.length === 0)
        throw notFound(`no host "${host}" in faults, GPU telemetry or findings (GET /v1/nodes lists them)`);
      return { node: node ?? quietNode(host), faults, findings: found, gpu_history: gpu };
    },
  );

  app.get(
    '/v1/cordon',
    {
      config,
      schema: {
        summary: 'Hosts an open finding says to cordon, drain or RMA',
        description: 'With "Accept: text/plain": one host per line, for scripts (e.g. xargs kubectl cordon).',
        tags: ['nodes'],
        response: {
          200: Type.Object({
            hosts: Type.Array(
              Type.Object({
                host: Type.String(),
                action: Type.String(),
                active_findings: Type.Integer(),
                faults: Type.Integer(),
              }),
            ),
          }),
          ...errors(...READ_ERRORS),
        },
      },
    },
    async (req, reply) => {
      const hosts = (await nodeHealth(store))
        .filter((n) => CORDON.has(n.worst_action))
        .map((n) => ({
          host: n.host,
          action: n.worst_action,
          active_findings: n.active_findings,
          faults: n.faults,
        }));
      if (wantsText(req.headers.accept))
        // A string payload is sent as is, past the JSON schema (typed for the JSON form).
        return reply
          .type('text/plain; charset=utf-8')
          .send(hosts.map((h) => `${h.host}\n`).join('') as never);
      return { hosts };
    },
  );

  app.get(
    '/v1/faults',
    {
      config,
      schema: {
        summary: 'Faults (XID, ECC, NCCL timeouts, exits), newest first',
        tags: ['nodes'],
        querystring: Type.Object({
          ...TimeQuery,
          host: Type.Optional(Type.String()),
          job: Type.Optional(Type.String()),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000 })),
        }),
        response: { 200: Type.Object({ faults: Type.Array(Fault) }), ...errors(...READ_ERRORS) },
      },
    },
    async (req) => {
      const { host, job, limit } = req.query;
      return { faults: await faultHistory(store, { ...parseRange(req.query), host, job, limit }) };
    },
  );
};
