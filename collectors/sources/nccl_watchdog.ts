/**
 * Tails training output for PyTorch NCCL watchdog timeouts → nccl_timeout faults, each with its
 * global rank, its rank in the process group and the group (from the exception line that
 * follows). Judging them (hang, desync, the rank stuck behind) is the `hang` detector's job.
 */
import { Type } from '@sinclair/typebox';
import { WatchdogReader } from '../parsers/nccl_watchdog.js';
import { type SourceFactory, sourceName } from '../source.js';
import { tailLines } from './lines.js';

const schema = Type.Object(
  {
    type: Type.Literal('nccl_watchdog'),
    name: Type.Optional(Type.String()),
    path: Type.String({ description: 'log file with the training processes’ stderr' }),
    from: Type.Union([Type.Literal('start'), Type.Literal('end')], { default: 'end' }),
    pollMs: Type.Integer({ minimum: 50, default: 500 }),
    job: Type.Optional(Type.String()),
    settleMs: Type.Integer({
      minimum: 0,
      default: 5000,
      description:
        'quiet time after which a timeout still waiting for its process-group line is sent without it',
    }),
  },
  { additionalProperties: false },
);

export const ncclWatchdog: SourceFactory<typeof schema> = {
  type: 'nccl_watchdog',
  description: 'NCCL collective timeouts from PyTorch watchdog lines, with global and group ranks',
  schema,
  create(cfg, deps) {
    const name = sourceName('nccl_watchdog', cfg.name);
    const reader = new WatchdogReader({ host: deps.host, job: cfg.job });
    let settle: NodeJS.Timeout | undefined;
    const flush = () => {
      const { events, problems } = reader.flush(deps.now());
      if (problems.length) deps.parseProblems(name, problems);
      if (events.length) deps.emit(events);
    };
    const input = tailLines(name, cfg, deps, (lines) => {
      const events: unknown[] = [];
      for (const line of lines) {
        const r = reader.push(line, deps.now());
        if (r.problems.length) deps.parseProblems(name, r.problems);
        events.push(...r.events);
      }
      if (events.length) deps.emit(events);
      clearTimeout(settle);
      settle = setTimeout(flush, cfg.settleMs);
    });
    return {
      type: 'nccl_watchdog',
      name,
      start: () => input.start(),
      stop: async () => {
        await input.stop();
        clearTimeout(settle);
        flush();
      },
    };
  },
};
