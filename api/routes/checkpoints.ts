/** Checkpoint save/load durations and failures per job and phase. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { checkpointStats } from '../../store/health-queries.js';
import type { Store } from '../../store/store.js';
import { errors, parseRange, READ_ERRORS, TimeQuery } from './common.js';

const Stats = Type.Object(
  {
    job: Type.String(),
    phase: Type.String(),
    count: Type.Integer(),
    failures: Type.Integer(),
    p50_ms: Type.Number(),
    p95_ms: Type.Number(),
    max_ms: Type.Number(),
    mean_ok_ms: Type.Union([Type.Number(), Type.Null()], { description: 'mean of successful durations' }),
  },
  // Figures the checkpoint queries add later pass through.
  { additionalProperties: true },
);

export const checkpointRoutes: FastifyPluginAsyncTypebox<{ store: Store }> = async (app, { store }) => {
  app.get(
    '/v1/checkpoints',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'Checkpoint durations (p50, p95, max) and failures per job and phase',
        tags: ['checkpoints'],
        querystring: Type.Object({ ...TimeQuery, job: Type.Optional(Type.String()) }),
        response: { 200: Type.Object({ checkpoints: Type.Array(Stats) }), ...errors(...READ_ERRORS) },
      },
    },
    async (req) => ({
      checkpoints: await checkpointStats(store, { ...parseRange(req.query), job: req.query.job }),
    }),
  );
};
