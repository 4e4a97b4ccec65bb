/**
 * Machines: node health (worst first), one node's faults, findings and throttling history, the
 * cordon list (JSON, or one host per line for scripts), and the fault log.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { type TSchema, Type } from '@sinclair/typebox';
import type { Automation } from '../../actions/automation.js';
import { HEALTHY, type NodeState, nodeStates } from '../../actions/node-states.js';
import { Finding } from '../../schema/finding.js';
import {
  faultHistory,
  gpuHistory,
  type NodeHealth as NodeHealthRow,
  nodeHealth,
  quietNode,
} from '../../store/health-queries.js';
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
    description:
      'what open findings ask for (a request, not a state): the strongest of none, watch, cordon, drain, rma',
  }),
  state: Type.String({
    description:
      "the node's state in the repair loop's durable state: healthy, suspect, cordoned, repairing, verifying",
  }),
  out_by_rankwatch: Type.Boolean({ description: 'the scheduler has it out by rankwatch' }),
  dry_run_out: Type.Boolean({ description: 'a dry-run took it out on paper (the scheduler never heard)' }),
  needs_human: Type.Boolean({ description: 'only an admin override brings it back' }),
  state_since: Nullable(Type.Number({ description: 'when it entered its state (epoch ms)' })),
  state_reason: Nullable(Type.String({ description: 'why it is in its state' })),
});

/** Health rows with each node's state (nodes only the repair loop knows of join as quiet rows). */
function withStates(rows: NodeHealthRow[], states: Map<string, NodeState>, host?: string) {
  const seen = new Set(rows.map((r) => r.host));
  const extra = [...states.keys()]
    .filter((h) => !seen.has(h) && (host === undefined || h === host))
    .map(quietNode);
  const out = [...rows, ...extra].map((r) => {
    const n = states.get(r.host) ?? HEALTHY;
    return {
      ...r,
      state: n.state,
      out_by_rankwatch: n.out_by_rankwatch,
      dry_run_out: n.dry_run_out,
      needs_human: n.needs_human,
      state_since: n.since,
      state_reason: n.reason,
    };
  });
  // Nodes out of their healthy state first, in the store's order (worst first) within each.
  return out.sort((a, b) => Number(b.state !== 'healthy') - Number(a.state !== 'healthy'));
}

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

export const nodeRoutes: FastifyPluginAsyncTypebox<{ store: Store; automation?: Automation }> = async (
  app,
  { store, automation },
) => {
  const config = { scope: 'read' as const };

  app.get(
    '/v1/nodes',
    {
      config,
      schema: {
        summary:
          "Nodes, worst first: each one's state in the repair loop, and its faults, throttling and what its open findings ask for",
        tags: ['nodes'],
        querystring: Type.Object(TimeQuery),
        response: { 200: Type.Object({ nodes: Type.Array(Node) }), ...errors(...READ_ERRORS) },
      },
    },
    async (req) => {
      const [rows, states] = await Promise.all([
        nodeHealth(store, parseRange(req.query)),
        nodeStates(store, automation),
      ]);
      return { nodes: withStates(rows, states) };
    },
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
      const [rows, states, faults, found, gpu] = await Promise.all([
        nodeHealth(store, { ...range, host }),
        nodeStates(store, automation),
        faultHistory(store, { ...range, host, limit: 200 }),
        findings(store, { ...range, host, limit: 200 }),
        gpuHistory(store, host, { ...range, limit: 1000 }),
      ]);
      if (rows.length === 0 && gpu.length === 0 && !states.has(host))
        throw notFound(`no host "${host}" in faults, GPU telemetry or findings (GET /v1/nodes lists them)`);
      const [node] = withStates(rows.length ? rows : [quietNode(host)], states, host);
      return { node, faults, findings: found, gpu_history: gpu };
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
