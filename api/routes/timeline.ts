/**
 * A job's timeline: its checkpoint saves (one row per save, however many ranks reported it) and
 * its interruptions (recorded job_events, or gaps in its steps), with the lifecycle rows. What the
 * page marks on the MFU chart; the same reads as GET /v1/failures (store/failure-queries.ts).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { type TSchema, Type } from '@sinclair/typebox';
import { jobTimeline } from '../../analytics/interruptions.js';
import { checkpointSaves, jobRecords } from '../../store/failure-queries.js';
import { jobSpan } from '../../store/queries.js';
import type { Store } from '../../store/store.js';
import { errors, notFound, parseRange, READ_ERRORS, TimeQuery } from './common.js';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);

const Save = Type.Object({
  ts: Type.Number({ description: 'when the save finished (its slowest rank)' }),
  step: Type.Integer(),
  dur_ms: Type.Number(),
  ok: Type.Boolean({ description: 'false if any rank reported the save failed' }),
});

const Interruption = Type.Object({
  ts: Type.Number(),
  restart_ts: Nullable(Type.Number()),
  cause: Type.String(),
  cause_from: Type.String({ description: 'job_event, fault (closest fault on the job’s hosts) or none' }),
  host: Type.Optional(Type.String()),
  gpu: Type.Optional(Type.Integer()),
  seen_from: Type.String({ description: 'job_event (recorded) or step_gap (inferred from the steps)' }),
  lost_ms: Type.Number({ description: 'rework since the last save plus downtime' }),
});

export const timelineRoutes: FastifyPluginAsyncTypebox<{ store: Store }> = async (app, { store }) => {
  app.get(
    '/v1/jobs/:job/timeline',
    {
      config: { scope: 'read' },
      schema: {
        summary: 'Checkpoint saves and interruptions of a job, oldest first (marks for the MFU chart)',
        tags: ['jobs'],
        params: Type.Object({ job: Type.String() }),
        querystring: Type.Object(TimeQuery),
        response: {
          200: Type.Object({
            job: Type.String(),
            saves: Type.Array(Save),
            interruptions: Type.Array(Interruption),
            lifecycle: Type.Array(
              Type.Object({ ts: Type.Number(), event: Type.String(), cause: Type.String() }),
              { description: 'job_event rows: start, restart, interrupted, finished' },
            ),
            notes: Type.Array(Type.String()),
          }),
          ...errors(...READ_ERRORS, 404),
        },
      },
    },
    async (req) => {
      const { job } = req.params;
      const range = parseRange(req.query);
      const [rec] = await jobRecords(store, { ...range, job });
      if (rec) {
        const t = jobTimeline(rec, Date.now());
        return {
          job,
          saves: rec.saves.map(({ ts, step, dur_ms, ok }) => ({ ts, step, dur_ms, ok })),
          interruptions: t.interruptions,
          lifecycle: rec.lifecycle.map(({ ts, event, cause }) => ({ ts, event, cause })),
          notes: t.notes,
        };
      }
      // No lifecycle rows: the saves are still worth marking; interruptions need job_events or steps.
      const saves = await checkpointSaves(store, { ...range, job });
      if (!saves.length && !(await jobSpan(store, job)))
        throw notFound(`no job "${job}" in the store (GET /v1/jobs lists the jobs with steps)`);
      return {
        job,
        saves: saves.map(({ ts, step, dur_ms, ok }) => ({ ts, step, dur_ms, ok })),
        interruptions: [],
        lifecycle: [],
        notes: ['no job_event rows for this job: interruptions are not known'],
      };
    },
  );
};
