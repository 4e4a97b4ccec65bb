/**
 * Jobs: the list (running first), one job's summary, and its MFU, step-time and per-rank
 * heatmap series. Series are bucketed by `step` (seconds, or "30s", "5m", "1h").
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { type TSchema, Type } from '@sinclair/typebox';
import { costliest } from '../../core/figures.js';
import { Finding } from '../../schema/finding.js';
import {
  findings,
  jobDetail,
  jobSpan,
  jobs,
  mfuOverTime,
  openFindingCounts,
  rankHeatmap,
  stepsOverTime,
} from '../../store/queries.js';
import type { Store } from '../../store/store.js';
import {
  boundReply,
  DURATION,
  errors,
  notFound,
  parseRange,
  parseStep,
  READ_ERRORS,
  TimeQuery,
} from './common.js';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);

const JobRow = Type.Object({
  job: Type.String(),
  status: Type.Union(
    ['running', 'finished', 'interrupted', 'stale'].map((s) => Type.Literal(s)),
    {
      description: 'running: steps within the last 5 minutes; finished/interrupted: its last lifecycle event',
    },
  ),
  first_ts: Type.Number(),
  last_ts: Type.Number(),
  ranks: Type.Integer({ description: 'ranks seen reporting steps' }),
  world_size: Type.Integer({ description: 'from the job event; 0 when none was sent' }),
  gpu_model: Type.String(),
  last_step: Type.Integer(),
  mfu_now: Nullable(Type.Number({ description: 'MFU of the last step with a figure (0..1)' })),
  mfu_avg: Nullable(Type.Number()),
  open_findings: Type.Integer(),
});

const JobSummary = Type.Object({
  ...JobRow.properties,
  step_ms: Nullable(Type.Number({ description: 'mean wall step time over the last 5 minutes' })),
  compute_ms: Nullable(Type.Number()),
  tokens_per_s: Nullable(Type.Number({ description: 'job tokens per second over the last 5 minutes' })),
  goodput: Nullable(
    Type.Number({ description: 'share of wall time spent on useful steps; null until restarts are tracked' }),
  ),
  hosts: Type.Array(Type.String()),
  findings: Type.Array(Finding, { description: 'open findings, costliest first' }),
});

const JobParams = Type.Object({ job: Type.String({ description: 'the job id of its events' }) });
const SeriesQuery = Type.Object({
  ...TimeQuery,
  step: Type.Optional(
    Type.String({
      pattern: DURATION,
      description:
        'bucket width: whole seconds, or 30s, 5m, 1h (default 60); a reply holds at most 200,000 buckets, past it a 400 names the step that fits',
    }),
  ),
});

export const jobRoutes: FastifyPluginAsyncTypebox<{ store: Store }> = async (app, { store }) => {
  const config = { scope: 'read' as const };
  const known = async (job: string) => {
    const span = await jobSpan(store, job);
    if (!span) throw notFound(`no job "${job}" in the store (GET /v1/jobs lists the jobs with steps)`);
    return span;
  };
  /** A series' buckets lie where the job has steps: the asked range cut to the job's span. */
  const boundSeries = (
    span: { first_ts: number; last_ts: number },
    range: { from?: number; to?: number },
    stepS: number,
  ) =>
    boundReply(
      Math.max(range.from ?? 0, span.first_ts),
      Math.min(range.to ?? span.last_ts, span.last_ts),
      stepS,
      1,
    );

  app.get(
    '/v1/jobs',
    {
      config,
      schema: {
        summary: 'Jobs with steps in the range (default: the last day), running first',
        tags: ['jobs'],
        querystring: Type.Object({
          ...TimeQuery,
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
        }),
        response: { 200: Type.Object({ jobs: Type.Array(JobRow) }), ...errors(...READ_ERRORS) },
      },
    },
    async (req) => {
      const range = parseRange(req.query);
      const [rows, openBy] = await Promise.all([
        jobs(store, { ...range, limit: req.query.limit }),
        openFindingCounts(store),
      ]);
      return {
        jobs: rows.map(({ mfu_last, ...j }) => ({
          ...j,
          mfu_now: mfu_last,
          open_findings: openBy.get(j.job) ?? 0,
        })),
      };
    },
  );

  app.get(
    '/v1/jobs/:job',
    {
      config,
      schema: {
        summary: "A job's summary: MFU, tokens/s, step time, open findings with their cost, hosts",
        tags: ['jobs'],
        params: JobParams,
        response: { 200: JobSummary, ...errors(...READ_ERRORS, 404) },
      },
    },
    async (req) => {
      const { job } = req.params;
      const d = await jobDetail(store, job);
      if (!d) throw notFound(`no job "${job}" in the store (GET /v1/jobs lists the jobs with steps)`);
      const open = (await findings(store, { job, state: 'active', limit: 10_000 })).sort(costliest);
      const status =
        d.last_event === 'finished' || d.last_event === 'interrupted'
          ? d.last_event
          : d.last_ts >= Date.now() - 5 * 60_000
            ? 'running'
            : 'stale';
      return {
        job,
        status,
        first_ts: d.first_ts,
        last_ts: d.last_ts,
        ranks: d.ranks,
        world_size: d.world_size,
        gpu_model: d.gpu_model,
        last_step: d.last_step,
        mfu_now: d.mfu_last,
        mfu_avg: d.mfu_avg,
        open_findings: open.length,
        step_ms: d.step_ms,
        compute_ms: d.compute_ms,
        tokens_per_s: d.tokens_per_s,
        goodput: null,
        hosts: d.hosts,
        findings: open,
      };
    },
  );

  const Mfu = Type.Object({
    ts: Type.Number(),
    mfu: Type.Number(),
    tflops_per_gpu: Type.Number(),
    step_ms: Type.Number(),
    steps: Type.Integer(),
    tokens_per_s: Nullable(
      Type.Number({ description: 'job tokens per second; null when no tokens are reported' }),
    ),
  });
  app.get(
    '/v1/jobs/:job/mfu',
    {
      config,
      schema: {
        summary: "A job's MFU over time, averaged per bucket",
        tags: ['jobs'],
        params: JobParams,
        querystring: SeriesQuery,
        response: {
          200: Type.Object({ job: Type.String(), step_s: Type.Number(), points: Type.Array(Mfu) }),
          ...errors(...READ_ERRORS, 404),
        },
      },
    },
    async (req) => {
      const { job } = req.params;
      const step = parseStep(req.query.step);
      const range = parseRange(req.query);
      boundSeries(await known(job), range, step);
      return { job, step_s: step, points: await mfuOverTime(store, job, { ...range, bucketSeconds: step }) };
    },
  );

  const Steps = Type.Object({
    ts: Type.Number(),
    steps: Type.Integer(),
    step_ms: Type.Number(),
    compute_p50_ms: Type.Number(),
    compute_max_ms: Type.Number(),
    comm_wait_p50_ms: Type.Number(),
  });
  app.get(
    '/v1/jobs/:job/steps',
    {
      config,
      schema: {
        summary: "A job's step time over time: wall, median and slowest compute, median wait in collectives",
        tags: ['jobs'],
        params: JobParams,
        querystring: SeriesQuery,
        response: {
          200: Type.Object({ job: Type.String(), step_s: Type.Number(), points: Type.Array(Steps) }),
          ...errors(...READ_ERRORS, 404),
        },
      },
    },
    async (req) => {
      const { job } = req.params;
      const step = parseStep(req.query.step);
      const range = parseRange(req.query);
      boundSeries(await known(job), range, step);
      return {
        job,
        step_s: step,
        points: await stepsOverTime(store, job, { ...range, bucketSeconds: step }),
      };
    },
  );

  const Cell = Type.Object({
    minute: Type.Number({ description: 'start of the cell, epoch ms' }),
    rank: Type.Integer(),
    host: Type.String(),
    gpu: Type.Integer(),
    stage: Type.Integer(),
    steps: Type.Integer(),
    compute_ms: Type.Number(),
    compute_max_ms: Type.Number(),
    comm_wait_ms: Nullable(Type.Number()),
    rel_compute: Type.Number({
      description: 'compute over the median of its stage peers in the cell (1 = typical)',
    }),
  });
  app.get(
    '/v1/jobs/:job/heatmap',
    {
      config,
      schema: {
        summary: 'Per-rank compute relative to its pipeline-stage peers, per cell of time',
        description:
          'Cells are whole minutes (step is rounded up to minutes). Default range: the last hour of the job. A reply holds at most 200,000 cells (ranks × columns): past it, a 400 names the step that fits.',
        tags: ['jobs'],
        params: JobParams,
        querystring: SeriesQuery,
        response: {
          200: Type.Object({ job: Type.String(), step_s: Type.Number(), cells: Type.Array(Cell) }),
          ...errors(...READ_ERRORS, 404),
        },
      },
    },
    async (req) => {
      const { job } = req.params;
      const minutes = Math.ceil(parseStep(req.query.step) / 60);
      const range = parseRange(req.query);
      const span = await known(job);
      const from = range.from ?? (range.to ?? span.last_ts) - 3_600_000;
      // A cell per rank and column, where the job has steps.
      const to = Math.min(range.to ?? span.last_ts, span.last_ts);
      boundReply(Math.max(from, span.first_ts), to, minutes * 60, span.ranks, 60);
      return {
        job,
        step_s: minutes * 60,
        cells: await rankHeatmap(store, job, { from, to: range.to, bucketMinutes: minutes }),
      };
    },
  );
};
