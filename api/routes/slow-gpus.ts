/**
 * The slowest GPUs: a job's latest ranking and the fleet's, each GPU with how much slower than its
 * pipeline-stage peers it runs (its own level, not a change) and what replacing it would buy. A GPU
 * slower from the start is silicon, not a finding unless it costs its job 5% (docs/detectors.md):
 * this is where operators find the rest, for maintenance.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { jobSpan } from '../../store/queries.js';
import { fleetSlowGpus, jobSlowGpus } from '../../store/slow-gpu-queries.js';
import type { Store } from '../../store/store.js';
import { errors, notFound, parseRange, READ_ERRORS, TimeQuery } from './common.js';

const SlowGpu = Type.Object({
  job: Type.String(),
  ts: Type.Number({ description: 'event time of the ranking, epoch ms' }),
  step: Type.Integer({ description: 'the job step of the ranking' }),
  rank: Type.Integer(),
  host: Type.String(),
  gpu: Type.Integer(),
  stage: Type.Integer({ description: 'pipeline stage: the peers it is compared with' }),
  slowdown_pct: Type.Number({
    description: "its own level against its stage peers' median compute, percent (negative: faster)",
  }),
  cost_pct: Type.Number({
    description:
      "share of the job's throughput replacing it with a typical GPU would buy: its lead over the next slowest rank while it is the one the job waits for; 0 when another rank sets the pace",
  }),
  gpu_hours_per_day: Type.Number({ description: "cost_pct of the job's GPUs, in GPU-hours a day" }),
  steps: Type.Integer({ description: 'steps its level was measured over' }),
});

const Limit = Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 }));

export const slowGpuRoutes: FastifyPluginAsyncTypebox<{ store: Store }> = async (app, { store }) => {
  const config = { scope: 'read' as const };

  app.get(
    '/v1/jobs/:job/slow-gpus',
    {
      config,
      schema: {
        summary: "A job's slowest GPUs: the one it waits for first, with what replacing each would buy",
        description:
          "The job's latest ranking (the straggler detector hands one out every 64 steps and when the job's steps close), by cost, then by how much slower than its stage peers each GPU runs. Empty until the job has run ~80 steps.",
        tags: ['jobs'],
        params: Type.Object({ job: Type.String({ description: 'the job id of its events' }) }),
        querystring: Type.Object({ limit: Limit }),
        response: {
          200: Type.Object({ job: Type.String(), gpus: Type.Array(SlowGpu) }),
          ...errors(...READ_ERRORS, 404),
        },
      },
    },
    async (req) => {
      const { job } = req.params;
      if (!(await jobSpan(store, job)))
        throw notFound(`no job "${job}" in the store (GET /v1/jobs lists the jobs with steps)`);
      return { job, gpus: await jobSlowGpus(store, job, req.query.limit ?? 16) };
    },
  );

  app.get(
    '/v1/slow-gpus',
    {
      config,
      schema: {
        summary: "The fleet's slowest GPUs: one row per GPU, by the GPU-hours a day it costs",
        description:
          'Every GPU in the latest ranking of a job that ran in the range (default: the last 7 days), with its figures from the most recent such job and how many jobs ranked it; by GPU-hours a day, then by slowdown.',
        tags: ['nodes'],
        querystring: Type.Object({ ...TimeQuery, limit: Limit }),
        response: {
          200: Type.Object({
            gpus: Type.Array(
              Type.Object({
                ...SlowGpu.properties,
                jobs: Type.Integer({ description: 'jobs in the range whose latest ranking lists it' }),
              }),
            ),
          }),
          ...errors(...READ_ERRORS),
        },
      },
    },
    async (req) => ({
      gpus: await fleetSlowGpus(store, { ...parseRange(req.query), limit: req.query.limit }),
    }),
  );
};
