/** The read API: one plugin per resource, all over the same store. */
import type { FastifyPluginAsync } from 'fastify';
import type { Automation } from '../../actions/automation.js';
import type { Store } from '../../store/store.js';
import { actionRoutes } from './actions.js';
import { checkpointRoutes } from './checkpoints.js';
import { errorHandler } from './common.js';
import { failureRoutes } from './failures.js';
import { findingRoutes } from './findings.js';
import { jobRoutes } from './jobs.js';
import { nodeRoutes } from './nodes.js';
import { slowGpuRoutes } from './slow-gpus.js';
import { timelineRoutes } from './timeline.js';

export const readRoutes: FastifyPluginAsync<{ store: Store; automation?: Automation }> = async (
  app,
  { store, automation },
) => {
  app.setErrorHandler(errorHandler(app.initialConfig.bodyLimit ?? 32 << 20, { storeRoutes: true }));
  await app.register(jobRoutes, { store });
  await app.register(findingRoutes, { store });
  await app.register(nodeRoutes, { store, automation });
  await app.register(checkpointRoutes, { store });
  await app.register(failureRoutes, { store });
  await app.register(actionRoutes, { store, automation });
  await app.register(timelineRoutes, { store });
  await app.register(slowGpuRoutes, { store });
};
