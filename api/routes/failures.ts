/**
 * For researchers: recorded failure rates (per cause, group, host or GPU model, with exact 95%
 * intervals, and the MTBF for a job of N GPUs) and one job's checkpoint-interval advice from its
 * own saves, restarts and interruptions. The figures come from store/failure-queries.ts; this
 * plugin only parses the request and shapes the reply. docs/research.md says how each is computed.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { type TSchema, Type } from '@sinclair/typebox';
import { CAUSE_GROUPS } from '../../analytics/causes.js';
import { RATE_BY, type RateBy } from '../../analytics/rates.js';
import {
  CHECKPOINT_INTERVAL_DEFAULTS,
  checkpointIntervalFinding,
} from '../../detectors/checkpoint/interval.js';
import { Finding } from '../../schema/finding.js';
import { failuresReport, jobCheckpointAdvice } from '../../store/failure-queries.js';
import type { Store } from '../../store/store.js';
import {
  badRequest,
  DURATION,
  errors,
  MAX_DURATION_S,
  notFound,
  parseDuration,
  parseRange,
  READ_ERRORS,
  TimeQuery,
} from './common.js';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
const Literals = (xs: readonly string[]) => Type.Union(xs.map((x) => Type.Literal(x)));

const Rate = Type.Object(
  { rate: Type.Number(), lo: Type.Number(), hi: Type.Number() },
  { description: 'the rate and its exact (Garwood) Poisson 95% interval' },
);

const RateRow = Type.Object({
  key: Type.String({ description: 'the cause, group, host or GPU model; "fleet" for the whole' }),
  group: Type.Optional(Type.String({ description: "a cause's coarse group" })),
  count: Type.Integer(),
  gpu_hours: Type.Number({ description: 'exposure: GPU-hours while jobs were up' }),
  node_days: Type.Number(),
  per_1k_node_days: Nullable(Rate),
  per_1m_gpu_hours: Nullable(Rate),
  few: Type.Boolean({ description: 'fewer than 10 events: the interval is too wide to act on' }),
});

const Interruption = Type.Object(
  {
    ts: Type.Number(),
    restart_ts: Nullable(Type.Number()),
    cause: Type.String(),
    group: Literals(CAUSE_GROUPS),
    cause_from: Literals(['job_event', 'fault', 'none']),
    host: Type.Optional(Type.String()),
    gpu: Type.Optional(Type.Integer()),
    seen_from: Literals(['job_event', 'step_gap']),
    last_save_ts: Nullable(Type.Number()),
    rework_ms: Type.Number(),
    down_ms: Nullable(Type.Number()),
    lost_ms: Type.Number({ description: 'rework (since the last save or restart) + downtime' }),
  },
  { additionalProperties: true },
);

const Timeline = Type.Object(
  {
    job: Type.String(),
    gpus: Type.Integer(),
    gpu_model: Type.String(),
    hosts: Type.Array(Type.String()),
    start_ts: Type.Number(),
    end_ts: Type.Number(),
    up_ms: Type.Number(),
    interruptions: Type.Array(Interruption),
    saves: Type.Integer(),
    save_ms: Type.Number(),
    ettr: Nullable(Type.Number({ description: 'effective training time ratio (goodput), 0..1' })),
    notes: Type.Array(Type.String()),
  },
  { additionalProperties: true },
);

const Mtbf = Type.Object({
  gpus: Type.Integer(),
  hours: Nullable(Type.Number({ description: 'null when nothing failed (the MTBF is at least lo)' })),
  lo: Type.Number(),
  hi: Nullable(Type.Number()),
});

const Report = {
  by: Literals(RATE_BY),
  fleet: RateRow,
  rows: Type.Array(RateRow),
  jobs: Type.Integer(),
  mtbf: Nullable(Mtbf),
  notes: Type.Array(Type.String()),
};

const Sourced = Type.Object({
  value: Type.Optional(Type.Number({ description: 'seconds; absent when nothing gave it' })),
  source: Type.String({ description: 'where the value came from, or what is missing' }),
});

const Advice = Type.Union([
  Type.Object(
    {
      ok: Type.Literal(true),
      saveS: Type.Number(),
      mtbfS: Type.Number(),
      restartS: Type.Number(),
      asyncLagS: Type.Number(),
      youngS: Type.Number(),
      dalyS: Type.Number(),
      dalyBranch: Literals(['higher_order', 'mtbf']),
      recommendedS: Type.Number({ description: "Daly's interval: compute seconds between saves" }),
      efficiencyRecommended: Type.Number(),
      currentS: Type.Optional(Type.Number()),
      efficiencyCurrent: Type.Optional(Type.Number()),
      currentLossPct: Type.Optional(Type.Number()),
      sensitivity: Type.Array(
        Type.Object({
          rateFactor: Type.Number(),
          mtbfS: Type.Number(),
          intervalS: Type.Number(),
          efficiencyAtOwn: Type.Number(),
          efficiencyAtAdvised: Type.Number(),
        }),
      ),
      notes: Type.Array(Type.String()),
    },
    { additionalProperties: true },
  ),
  Type.Object(
    {
      ok: Type.Literal(false),
      missing: Type.Array(Type.String(), { description: 'e.g. "save time", "failure rate"' }),
      needs: Type.Array(Type.String(), { description: 'what the advice would need, one per missing input' }),
    },
    { description: 'no advice yet: what is missing and what would give it' },
  ),
]);

/** A job size no cluster reaches: past it a `gpus` is a typo, not a question. */
const MAX_GPUS = 10_000_000;
/** The longest save, restart, interval or MTBF an override may give: 100 years, in seconds. */
const MAX_SPAN_S = MAX_DURATION_S;

const Since = {
  since: Type.Optional(
    Type.String({ pattern: DURATION, description: 'a span back from now (7d, 36h, 90m); or give from' }),
  ),
};

/** `since` is shorthand for `from` = now − span; giving both is ambiguous. */
function range(q: { from?: string; to?: string; since?: string }, now: number) {
  const r = parseRange(q);
  if (q.since === undefined || q.since === '') return r;
  if (r.from !== undefined) throw badRequest('since', 'give since or from, not both');
  const from = now - parseDuration(q.since, 'since', 0) * 1000;
  if (from < 0) throw badRequest('since', `"${q.since}" reaches back before 1970; no event lies there`);
  return { ...r, from };
}

export const failureRoutes: FastifyPluginAsyncTypebox<{ store: Store }> = async (app, { store }) => {
  app.get(
    '/v1/failures',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'Recorded interruptions as failure rates with exact 95% intervals, and the MTBF for N GPUs',
        tags: ['research'],
        querystring: Type.Object({
          ...TimeQuery,
          ...Since,
          by: Type.Optional(Literals(RATE_BY)),
          gpus: Type.Optional(
            Type.Integer({
              minimum: 1,
              maximum: MAX_GPUS,
              description: 'job size for the MTBF (default: the largest job)',
            }),
          ),
        }),
        response: {
          200: Type.Object({
            ...Report,
            as_of: Type.Number({ description: 'the time that closed jobs still running (epoch ms)' }),
            timelines: Type.Array(Timeline),
          }),
          ...errors(...READ_ERRORS),
        },
      },
    },
    async (req) => {
      const now = Date.now();
      const r = await failuresReport(store, {
        ...range(req.query, now),
        by: req.query.by as RateBy | undefined,
        gpus: req.query.gpus,
        now,
      });
      return { ...r, as_of: now };
    },
  );

  app.get(
    '/v1/jobs/:job/checkpoint-advice',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'Checkpoint-interval advice for a job from its own saves, restarts and interruptions',
        description:
          'A job with no save or no failure rate yet answers 200 with advice.ok false, the inputs missing and what they need.',
        tags: ['research'],
        params: Type.Object({ job: Type.String() }),
        querystring: Type.Object({
          ...TimeQuery,
          ...Since,
          save_s: Type.Optional(
            Type.Number({ minimum: 0, maximum: MAX_SPAN_S, description: 'override: blocking save time, s' }),
          ),
          mtbf_h: Type.Optional(
            Type.Number({
              minimum: 0,
              maximum: MAX_SPAN_S / 3600,
              description: 'override: MTBF at the job size, h',
            }),
          ),
          restart_s: Type.Optional(
            Type.Number({ minimum: 0, maximum: MAX_SPAN_S, description: 'override: restart time, s' }),
          ),
          interval_s: Type.Optional(
            Type.Number({
              minimum: 0,
              maximum: MAX_SPAN_S,
              description: 'override: compute seconds between saves now',
            }),
          ),
          max_loss_pct: Type.Optional(
            Type.Number({
              minimum: 0,
              maximum: 100,
              description: `goodput the current interval may give up before a finding, percent (default ${CHECKPOINT_INTERVAL_DEFAULTS.maxLossPct})`,
            }),
          ),
        }),
        response: {
          200: Type.Object({
            job: Type.String(),
            inputs: Type.Object({
              saveS: Sourced,
              mtbfS: Sourced,
              restartS: Sourced,
              intervalS: Sourced,
            }),
            advice: Advice,
            timeline: Timeline,
            fleet: Nullable(
              Type.Object(Report, {
                description: "the fleet's rates, read only when the job has no interruption of its own",
              }),
            ),
            finding: Nullable(Finding),
          }),
          ...errors(...READ_ERRORS, 404),
        },
      },
    },
    async (req) => {
      const now = Date.now();
      const q = req.query;
      const r = await jobCheckpointAdvice(store, req.params.job, {
        ...range(q, now),
        now,
        given: {
          saveS: q.save_s,
          mtbfS: q.mtbf_h === undefined ? undefined : q.mtbf_h * 3600,
          restartS: q.restart_s,
          intervalS: q.interval_s,
        },
      });
      if (!r)
        throw notFound(
          `no job "${req.params.job}" recorded in the store (no job or job_event event for it${q.from || q.since ? ' in the range' : ''}): check the id; GET /v1/failures lists the jobs it counts`,
        );
      const finding = r.advice.ok
        ? checkpointIntervalFinding(r.job, r.advice, r.timeline.end_ts, {
            maxLossPct: q.max_loss_pct ?? CHECKPOINT_INTERVAL_DEFAULTS.maxLossPct,
          })
        : undefined;
      return { ...r, finding: finding ?? null };
    },
  );
};
