/**
 * The cordon automation's admin routes: approve or reject a cordon waiting for a person, reset
 * the breaker, override a node's health, start and finish a repair; and the pending approvals
 * with the audit. Every change is made in the name of the token that asked (the audit's actor).
 * A server without the automation (`rankwatch serve`) answers 409 saying where it runs.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { Automation } from '../../actions/automation.js';
import type { HealthState } from '../../detectors/health/health.js';
import { auditLog } from '../../store/action-queries.js';
import type { Store } from '../../store/store.js';
import { errors, HttpError, notFound, parseRange, READ_ERRORS, TimeQuery } from './common.js';

const STATES: HealthState[] = ['healthy', 'suspect', 'cordoned', 'repairing', 'verifying'];
const OneOf = <T extends string>(values: readonly T[], description: string) =>
  Type.Unsafe<T>({ type: 'string', enum: [...values], description: `${description}: ${values.join(', ')}` });

const AuditEntry = Type.Object({
  ts: Type.Number(),
  id: Type.String({ description: 'the action id (approve/reject take it)' }),
  host: Type.String(),
  verb: Type.String({ description: 'cordon, uncordon, breaker_trip, breaker_reset, reconcile' }),
  driver: Type.String(),
  outcome: Type.String({ description: 'done, dry_run, refused, pending_approval, failed' }),
  reason: Type.String(),
  finding_id: Type.String(),
  actor: Type.String({ description: '`rankwatch`, or the name of the token that asked' }),
  attempts: Type.Integer(),
});

const Transition = Type.Object({
  ts: Type.Number(),
  host: Type.String(),
  gpu: Type.Optional(Type.Integer()),
  from: Type.String(),
  to: Type.String(),
  reason: Type.String(),
  evidence: Type.Array(Type.String()),
  actor: Type.String(),
  needs_human: Type.Boolean(),
});

const Moves = Type.Object({ host: Type.String(), transitions: Type.Array(Transition) });

const ENABLE =
  'it runs inside `rankwatch up` (dry-run by default; `--cordon-driver slurm|kubernetes --cordon-enable` with --cordon-max-share, --cordon-max-nodes and --cordon-per-hour acts)';

/** What the automation does with a cordon: off (no automation here), dry_run, act, or approval. */
function modeOf(a: Automation | undefined): 'off' | 'dry_run' | 'act' | 'approval' {
  return a ? a.mode : 'off';
}

export const actionRoutes: FastifyPluginAsyncTypebox<{ store: Store; automation?: Automation }> = async (
  app,
  { store, automation },
) => {
  const admin = { scope: 'admin' as const };
  const running = (): Automation => {
    if (!automation) throw new HttpError(409, `cordon automation is not running in this server: ${ENABLE}`);
    if (!automation.active)
      throw new HttpError(
        409,
        'this process does not lead the repair loop (another process sharing the store holds its lease, or its state could not be read back yet; /healthz says which): send this to the leader, or try again shortly',
      );
    return automation;
  };
  /** 404 unless the host is in the automation's view or in the store. */
  const knownHost = async (a: Automation, host: string) => {
    if (a.knowsHost(host)) return;
    const seen = await store.query<{ n: number }>(
      `SELECT count() AS n FROM (
         SELECT host FROM gpu_minute WHERE host = {host:String} LIMIT 1
         UNION ALL SELECT host FROM rank_minute WHERE host = {host:String} LIMIT 1
         UNION ALL SELECT host FROM faults WHERE host = {host:String} LIMIT 1)`,
      { host },
    );
    if (!(Number(seen[0]?.n) > 0))
      throw notFound(`no host "${host}" in events, faults or GPU telemetry (GET /v1/nodes lists them)`);
  };

  app.get(
    '/v1/actions',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'Cordons waiting for approval, and the action audit newest first',
        tags: ['actions'],
        querystring: Type.Object({
          ...TimeQuery,
          host: Type.Optional(Type.String()),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000, default: 100 })),
        }),
        response: {
          200: Type.Object({
            mode: Type.String({
              description:
                'off (no automation in this server), dry_run, act, or approval (every cordon waits for a person)',
            }),
            driver: Type.String({ description: 'slurm, kubernetes, or none' }),
            breaker_tripped: Type.Boolean(),
            budget: Type.Union(
              [
                Type.Object({
                  nodes_out: Type.Integer({ description: 'out by rankwatch (in dry-run: out on paper)' }),
                  nodes_limit: Type.Integer({ description: 'most nodes out at once' }),
                  limit_by: Type.String({ description: 'the setting that sets nodes_limit' }),
                  fleet: Type.Integer({ description: 'nodes the share is of' }),
                  cordons_last_hour: Type.Integer(),
                  per_hour: Type.Union([Type.Integer(), Type.Null()], {
                    description: 'cordons per hour allowed',
                  }),
                  breaker_burst: Type.Integer({
                    description: 'requests in the window that trip the breaker',
                  }),
                  breaker_window_s: Type.Integer(),
                  breaker_tripped_at: Type.Union([Type.Number(), Type.Null()]),
                  breaker_reason: Type.Union([Type.String(), Type.Null()]),
                }),
                Type.Null(),
              ],
              { description: 'the budget and breaker now; null without automation in this server' },
            ),
            leading: Type.Optional(
              Type.Boolean({ description: 'this process leads the repair loop (its decisions count)' }),
            ),
            nodes: Type.Array(
              Type.Object({
                host: Type.String(),
                state: Type.String(),
                needs_human: Type.Boolean({ description: 'only an admin override brings it back' }),
                out_by_rankwatch: Type.Boolean({ description: 'the scheduler has it out by rankwatch' }),
                dry_run_out: Type.Optional(Type.Boolean({ description: 'a dry-run took it out on paper' })),
                pending_approval: Type.Optional(
                  Type.Boolean({ description: 'a cordon of it waits for a person' }),
                ),
                since: Type.Optional(Type.Number({ description: 'when it entered its state (epoch ms)' })),
                reason: Type.Optional(Type.String({ description: 'why it is in its state' })),
                ignored_check: Type.Optional(
                  Type.String({
                    description:
                      'verifying: the last check set aside because it was dated before the repair finished',
                  }),
                ),
              }),
              { description: 'hosts not healthy in the automation’s node health, now' },
            ),
            pending: Type.Array(
              Type.Object({ id: Type.String(), host: Type.String(), finding_id: Type.String() }),
            ),
            audit: Type.Array(AuditEntry, { description: 'from the action_audit table, newest first' }),
          }),
          ...errors(...READ_ERRORS),
        },
      },
    },
    async (req) => ({
      mode: modeOf(automation),
      driver: automation?.driverType ?? 'none',
      breaker_tripped: automation?.governor.tripped ?? false,
      budget: automation?.budgetNow() ?? null,
      leading: automation?.active ?? false,
      nodes: automation?.cordonList() ?? [],
      pending: automation?.pendingApprovals() ?? [],
      audit: await auditLog(store, {
        ...parseRange(req.query),
        host: req.query.host,
        limit: req.query.limit,
      }),
    }),
  );

  const settle = (approve: boolean) => async (id: string, actor: string) => {
    const a = running();
    if (!a.pendingApprovals().some((p) => p.id === id)) {
      if (modeOf(a) !== 'approval')
        throw new HttpError(
          409,
          `no cordon waits for approval here: this server's automation is ${modeOf(a)}; cordons wait for a person only with --cordon-driver, --cordon-enable and --cordon-approval`,
        );
      throw notFound(`no pending action "${id}" (GET /v1/actions lists the pending ones)`);
    }
    return approve ? a.approve(id, actor) : a.reject(id, actor);
  };
  for (const [verb, approve] of [
    ['approve', true],
    ['reject', false],
  ] as const)
    app.post(
      `/v1/actions/:id/${verb}`,
      {
        config: admin,
        schema: {
          summary: `${approve ? 'Approve' : 'Reject'} a cordon waiting for a person (admin); audited with the token name`,
          tags: ['actions'],
          params: Type.Object({ id: Type.String() }),
          response: { 200: AuditEntry, ...errors(...READ_ERRORS, 404, 409) },
        },
      },
      async (req) => settle(approve)(req.params.id, req.principal ?? 'anonymous'),
    );

  app.post(
    '/v1/breaker/reset',
    {
      config: admin,
      schema: {
        summary: 'Reset the cordon breaker after a burst (admin); audited with the token name',
        tags: ['actions'],
        response: { 200: AuditEntry, ...errors(...READ_ERRORS, 409) },
      },
    },
    async (req) => running().resetBreaker(req.principal ?? 'anonymous'),
  );

  app.post(
    '/v1/nodes/:host/health',
    {
      config: admin,
      schema: {
        summary: "Override a node's (or one GPU's) health (admin); the transition names the token",
        tags: ['actions'],
        params: Type.Object({ host: Type.String() }),
        body: Type.Object(
          {
            to: OneOf(STATES, 'the state to set'),
            reason: Type.String({ minLength: 1, maxLength: 2000, description: 'why, for the record' }),
            gpu: Type.Optional(Type.Integer({ minimum: 0, description: 'one GPU; absent: the host' })),
          },
          { additionalProperties: false },
        ),
        response: { 200: Moves, ...errors(...READ_ERRORS, 404, 409) },
      },
    },
    async (req) => {
      const a = running();
      const { host } = req.params;
      await knownHost(a, host);
      const { to, reason, gpu } = req.body;
      const transitions = a.overrideHealth(host, to, req.principal ?? 'anonymous', reason, gpu);
      req.log.info({ audit: { action: 'health_override', host, gpu, to } }, 'node health override');
      return { host, transitions };
    },
  );

  app.post(
    '/v1/nodes/:host/repair',
    {
      config: admin,
      schema: {
        summary:
          'A repair starts (cordoned → repairing) or finishes (→ verifying: checks ingested from now on decide) (admin)',
        tags: ['actions'],
        params: Type.Object({ host: Type.String() }),
        body: Type.Object(
          { phase: OneOf(['start', 'finish'] as const, 'the repair phase') },
          {
            additionalProperties: false,
          },
        ),
        response: { 200: Moves, ...errors(...READ_ERRORS, 404, 409) },
      },
    },
    async (req) => {
      const a = running();
      const { host } = req.params;
      await knownHost(a, host);
      const actor = req.principal ?? 'anonymous';
      const start = req.body.phase === 'start';
      const transitions = start ? a.startRepair(host, actor) : a.finishRepair(host, actor);
      if (transitions.length === 0)
        throw new HttpError(
          409,
          `host "${host}" is ${a.health.state(host)}: a repair ${start ? 'starts from cordoned' : 'finishes from repairing or cordoned'}`,
        );
      return { host, transitions };
    },
  );
};
