/**
 * Tails a file where nccl-tests runs are written (burn-in or periodic probes); each complete run
 * (up to its "# Avg bus bandwidth" line) becomes link-probe `collective` events (`probe: true`).
 */
import { Type } from '@sinclair/typebox';
import { ncclTestEvents, parseNcclTests } from '../parsers/nccl_tests.js';
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
    job: Type.Optional(Type.String({ description: 'job for the probe events (default probe:<hosts>)' })),
    test: Type.Optional(
      Type.String({ description: 'binary name when the output does not say (all_reduce_perf …)' }),
    ),
  },
  { additionalProperties: false },
);

export const ncclTests: SourceFactory<typeof schema> = {
  type: 'nccl_tests',
  description: 'link-probe results from nccl-tests output (all_reduce_perf and friends)',
  schema,
  create(cfg, deps) {
    const name = sourceName('nccl_tests', cfg.name);
    let block: string[] = [];
    const input = tailLines(name, cfg, deps, (lines) => {
      for (const line of lines) {
        if (block.length >= MAX_LINES) {
          deps.parseProblems(name, [
            { line: 0, reason: `no "# Avg bus bandwidth" within ${MAX_LINES} lines`, raw: '' },
          ]);
          block = [];
        }
        block.push(line);
        if (!/Avg bus bandwidth/.test(line)) continue;
        const r = parseNcclTests(block.join('\n'));
        block = [];
        if (r.problems.length) deps.parseProblems(name, r.problems);
        const events = ncclTestEvents(r, { ts: deps.now(), job: cfg.job, test: cfg.test, host: deps.host });
        if (events.length) deps.emit(events);
      }
    });
    return { type: 'nccl_tests', name, start: () => input.start(), stop: () => input.stop() };
  },
};
