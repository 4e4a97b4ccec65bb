/**
 * Findings: the incident list (filters, newest first, cursor paging), one incident's history,
 * and the admin actions ack and silence, stored with the name of the token that made them.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { FINDING_TYPES, Finding, Severity } from '../../schema/finding.js';
import { acksOf, type FindingAck, findingHistory, findings, recordAck } from '../../store/queries.js';
import type { Store } from '../../store/store.js';
import {
  DURATION,
  decodeCursor,
  encodeCursor,
  errors,
  notFound,
  parseDuration,
  parseRange,
  READ_ERRORS,
  TimeQuery,
} from './common.js';

const Ack = Type.Object({
  id: Type.String(),
  action: Type.Union([Type.Literal('ack'), Type.Literal('silence')]),
  ts: Type.Number(),
  by: Type.String({ description: 'name of the token that made it' }),
  until: Type.Union([Type.Number(), Type.Null()], { description: 'silence end, epoch ms' }),
  note: Type.String(),
});

const Incident = Type.Intersect([
  Finding,
  Type.Object({
    acked_by: Type.Optional(Type.String({ description: 'token name of the latest ack' })),
    acked_at: Type.Optional(Type.Number({ description: 'epoch ms of the latest ack' })),
    silenced_until: Type.Optional(Type.Number({ description: 'epoch ms, while a silence holds' })),
    silenced_by: Type.Optional(Type.String({ description: 'token name of the silence in force' })),
  }),
]);

const Page = Type.Object({
  findings: Type.Array(Incident),
  next_cursor: Type.Union([Type.String(), Type.Null()], { description: 'pass as cursor for the next page' }),
});

const Id = Type.Object({ id: Type.String() });

/** Adds the latest ack and any silence still in force to each incident. */
async function withAcks(store: Store, fs: Finding[], now: number) {
  const acks = await acksOf(
    store,
    fs.map((f) => f.id),
  );
  const last = new Map<string, { ack?: FindingAck; silence?: FindingAck }>();
  for (const a of acks) last.set(a.id, { ...last.get(a.id), [a.action]: a });
  return fs.map((f) => {
    const a = last.get(f.id);
    const until = a?.silence?.until ?? null;
    return {
      ...f,
      ...(a?.ack ? { acked_by: a.ack.by, acked_at: a.ack.ts } : {}),
      ...(until !== null && until > now ? { silenced_until: until, silenced_by: a?.silence?.by } : {}),
    };
  });
}

export const findingRoutes: FastifyPluginAsyncTypebox<{ store: Store }> = async (app, { store }) => {
  app.get(
    '/v1/findings',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'Incidents in their latest state, newest first; every filter given must match',
        tags: ['findings'],
        querystring: Type.Object({
          ...TimeQuery,
          job: Type.Optional(Type.String()),
          host: Type.Optional(Type.String()),
          type: Type.Optional(Type.Union(FINDING_TYPES.map((t) => Type.Literal(t)))),
          status: Type.Optional(
            Type.Union([Type.Literal('open'), Type.Literal('resolved')], {
              description: 'open: not resolved (including updated); resolved',
            }),
          ),
          severity: Type.Optional(Severity),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
          cursor: Type.Optional(Type.String({ description: 'next_cursor of the previous page' })),
        }),
        response: { 200: Page, ...errors(...READ_ERRORS) },
      },
    },
    async (req) => {
      const q = req.query;
      const after = decodeCursor(q.cursor);
      const range = parseRange(q);
      const limit = q.limit ?? 100;
      const rows = await findings(store, {
        ...range,
        job: q.job,
        host: q.host,
        type: q.type,
        severity: q.severity,
        state: q.status === 'open' ? 'active' : q.status,
        after,
        limit: limit + 1,
      });
      const page = rows.slice(0, limit);
      const last = page.at(-1);
      return {
        findings: await withAcks(store, page, Date.now()),
        next_cursor: rows.length > limit && last ? encodeCursor(last.ts, last.id) : null,
      };
    },
  );

  app.get(
    '/v1/findings/:id',
    {
      config: { scope: 'read' },
      schema: {
        summary:
          'One incident: its latest state and its history (open, updates, resolve), each with evidence',
        tags: ['findings'],
        params: Id,
        response: {
          200: Type.Object({ finding: Incident, history: Type.Array(Finding), acks: Type.Array(Ack) }),
          ...errors(...READ_ERRORS, 404),
        },
      },
    },
    async (req) => {
      const { id } = req.params;
      const history = await findingHistory(store, id);
      const latest = history.at(-1);
      if (!latest) throw notFound(`no finding with id "${id}" (GET /v1/findings lists them)`);
      const [finding] = await withAcks(store, [latest], Date.now());
      return { finding, history, acks: await acksOf(store, [id]) };
    },
  );

  const act =
    (action: 'ack' | 'silence') =>
    async (
      id: string,
      by: string,
      note: string,
      until: number | null,
      log: { info: (o: object, m: string) => void },
    ) => {
      if ((await findingHistory(store, id)).length === 0)
        throw notFound(`no finding with id "${id}" (GET /v1/findings lists them)`);
      const a: FindingAck = { id, action, ts: Date.now(), by, until, note };
      await recordAck(store, a);
      // The audit line (docs/api.md): who acked or silenced what, beside the finding_acks row.
      log.info(
        { audit: { action, finding: id, by, until, note } },
        `audit: finding ${id} ${action === 'ack' ? 'acked' : `silenced until ${new Date(until ?? 0).toISOString()}`} by ${by}`,
      );
      return a;
    };

  app.post(
    '/v1/findings/:id/ack',
    {
      config: { scope: 'admin' },
      // The body is optional: none is an ack without a note.
      preValidation: async (req) => {
        req.body ??= {};
      },
      schema: {
        summary: 'Acknowledge an incident (admin); stored with the token name',
        tags: ['findings'],
        params: Id,
        body: Type.Object({ note: Type.Optional(Type.String({ maxLength: 2000 })) }),
        response: { 200: Ack, ...errors(...READ_ERRORS, 404) },
      },
    },
    async (req) =>
      act('ack')(req.params.id, req.principal ?? 'anonymous', req.body.note ?? '', null, req.log),
  );

  app.post(
    '/v1/findings/:id/silence',
    {
      config: { scope: 'admin' },
      schema: {
        summary: 'Silence alerts for an incident for a while (admin); stored with the token name',
        tags: ['findings'],
        params: Id,
        body: Type.Object({
          for: Type.String({ pattern: DURATION, description: 'how long: 30m, 4h, 2d' }),
          note: Type.Optional(Type.String({ maxLength: 2000 })),
        }),
        response: { 200: Ack, ...errors(...READ_ERRORS, 404) },
      },
    },
    async (req) => {
      const s = parseDuration(req.body.for, 'for', 3600, 'body');
      return act('silence')(
        req.params.id,
        req.principal ?? 'anonymous',
        req.body.note ?? '',
        Date.now() + s * 1000,
        req.log,
      );
    },
  );
};
