/**
 * Tails training output for PyTorch NCCL watchdog timeouts → nccl_timeout faults. Once the
 * timeouts settle (no new one for `settleMs`), the rank whose last SeqNum lags its peers is
 * reported as a fault of its own (code `stuck_behind`): it is the one the others waited for.
 */
import { Type } from '@sinclair/typebox';
import { findLaggards, parseWatchdogLine, type WatchdogTimeout } from '../parsers/nccl_watchdog.js';
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
      description: 'quiet time before naming the laggard',
    }),
  },
  { additionalProperties: false },
);

export const ncclWatchdog: SourceFactory<typeof schema> = {
  type: 'nccl_watchdog',
  description: 'NCCL collective timeouts from PyTorch watchdog lines, and the rank stuck behind',
  schema,
  create(cfg, deps) {
    const name = sourceName('nccl_watchdog', cfg.name);
    let lineNo = 0;
    let pending: WatchdogTimeout[] = [];
    let settle: NodeJS.Timeout | undefined;
    const judge = () => {
      const laggards = findLaggards(pending);
      pending = [];
      if (laggards.length === 0) return;
      deps.emit(
        laggards.map((l) => ({
          v: 1,
          kind: 'fault',
          ts: deps.now(),
          host: deps.host,
          ...(cfg.job ? { job: cfg.job } : {}),
          rank: l.rank,
          source: 'nccl_timeout',
          code: 'stuck_behind',
          message: `rank ${l.rank} is stuck behind its peers: its last collective was SeqNum ${l.seq}, theirs ${l.peersSeq} (process group ${l.pg})`,
          seq: l.seq,
          peers_seq: l.peersSeq,
          pg: l.pg,
        })),
      );
    };
    const input = tailLines(name, cfg, deps, (lines) => {
      const events: unknown[] = [];
      for (const line of lines) {
        const r = parseWatchdogLine(line, ++lineNo, deps.now(), { host: deps.host, job: cfg.job });
        if ('problem' in r) deps.parseProblems(name, [r.problem]);
        else if ('event' in r) {
          events.push(r.event);
          if (pending.length < 100_000) pending.push(r.timeout);
        }
      }
      if (events.length) {
        deps.emit(events);
        clearTimeout(settle);
        settle = setTimeout(judge, cfg.settleMs);
      }
    });
    return {
      type: 'nccl_watchdog',
      name,
      start: () => input.start(),
      stop: async () => {
        await input.stop();
        clearTimeout(settle);
        judge();
      },
    };
  },
};
