/**
 * Tails a file where nccl-tests runs are written (burn-in or periodic probes). Each run becomes
 * one `check` event (tool `nccl-tests`) at its "# Avg bus bandwidth" summary; a run cut off
 * before it (the next run starts, the file goes quiet, the source stops) is kept with
 * `complete: false`, so its rows still count.
 */
import { Type } from '@sinclair/typebox';
import { isRunSummary, ncclTestCheck, parseNcclTests, startsRun } from '../parsers/nccl_tests.js';
import { type SourceFactory, sourceName } from '../source.js';
import { tailLines } from './lines.js';

const MAX_LINES = 20_000;

const schema = Type.Object(
  {
    type: Type.Literal('nccl_tests'),
    name: Type.Optional(Type.String()),
    path: Type.String({ description: 'file that nccl-tests output is appended to' }),
    from: Type.Union([Type.Literal('start'), Type.Literal('end')], { default: 'start' }),
    pollMs: Type.Integer({ minimum: 50, default: 1000 }),
    job: Type.Optional(Type.String({ description: 'job the checks belong to, if any' })),
    test: Type.Optional(
      Type.String({ description: 'binary name when the output does not say (all_reduce_perf …)' }),
    ),
    expectedGbs: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        description: 'bus bandwidth (GB/s) a healthy run reaches at its largest sizes on these hosts',
      }),
    ),
    cutOffAfterMs: Type.Integer({
      minimum: 1000,
      default: 300_000,
      description: 'quiet time after which a run without its summary is reported as cut off',
    }),
  },
  { additionalProperties: false },
);

export const ncclTests: SourceFactory<typeof schema> = {
  type: 'nccl_tests',
  description: 'nccl-tests runs (all_reduce_perf and friends) as `check` events',
  schema,
  create(cfg, deps) {
    const name = sourceName('nccl_tests', cfg.name);
    let block: string[] = [];
    let quiet: NodeJS.Timeout | undefined;
    const finish = () => {
      if (block.length === 0) return;
      const r = parseNcclTests(block.join('\n'));
      block = [];
      if (r.problems.length) deps.parseProblems(name, r.problems);
      const check = ncclTestCheck(r, {
        ts: deps.now(),
        job: cfg.job,
        test: cfg.test,
        host: deps.host,
        expectedGbs: cfg.expectedGbs,
      });
      if (check) deps.emit([check]);
    };
    const input = tailLines(name, cfg, deps, (lines) => {
      for (const line of lines) {
        if (block.length >= MAX_LINES) {
          deps.parseProblems(name, [
            { line: 0, reason: `no "# Avg bus bandwidth" within ${MAX_LINES} lines`, raw: '' },
          ]);
          finish();
        }
        if (startsRun(line)) finish();
        block.push(line);
        if (isRunSummary(line)) finish();
      }
      clearTimeout(quiet);
      if (block.length) quiet = setTimeout(finish, cfg.cutOffAfterMs);
    });
    return {
      type: 'nccl_tests',
      name,
      start: () => input.start(),
      stop: async () => {
        await input.stop();
        clearTimeout(quiet);
        finish();
      },
    };
  },
};
