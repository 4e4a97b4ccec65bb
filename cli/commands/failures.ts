import { RATE_BY, type RateBy } from '../../analytics/rates.js';
import { RankwatchError } from '../../core/errors.js';
import { type Command, num, parse } from '../args.js';
import { openStore, STORE_FLAGS, STORE_FLAGS_HELP } from '../store-options.js';
import { table } from '../table.js';
import { dur, parseSince, pct, rate } from './research-format.js';

export const failures: Command = {
  name: 'failures',
  usage: `rankwatch failures (--data DIR | --clickhouse-url URL) [--since WHEN] [--by ${RATE_BY.join('|')}] [--gpus N] [--json]

Recorded interruptions as failure rates: counts, exposure (GPU-hours and node-days while jobs
were up), rates per 1,000 node-days and per 10⁶ GPU-hours with exact Poisson 95% intervals, and
the MTBF a job of N GPUs can expect, with its interval.

  --since WHEN   only what was recorded since (ISO time, epoch ms, or 7d / 36h / 90m)
  --by KEY       rows per ${RATE_BY.join(', ')} (default cause)
  --gpus N       job size for the MTBF (default: the largest job recorded)
  --json         print JSON (rows, fleet, mtbf, and each job's interruption timeline)
${STORE_FLAGS_HELP}`,
  async run(argv) {
    const { values } = parse(argv, {
      ...STORE_FLAGS,
      since: { type: 'string' },
      by: { type: 'string' },
      gpus: { type: 'string' },
      json: { type: 'boolean' },
    });
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const by = (values.by ?? 'cause') as RateBy;
    if (!RATE_BY.includes(by))
      throw new RankwatchError('RANKWATCH_ERR_USAGE', `--by takes ${RATE_BY.join(', ')}, got "${values.by}"`);
    const gpus = values.gpus === undefined ? undefined : num(values.gpus, 'gpus');
    if (gpus !== undefined && !(gpus >= 1))
      throw new RankwatchError('RANKWATCH_ERR_USAGE', '--gpus needs a number ≥ 1');
    const now = Date.now();
    const { store, where } = await openStore(values);
    try {
      await store.migrate();
      const { failuresReport } = await import('../../store/failure-queries.js');
      const r = await failuresReport(store, {
        by,
        gpus,
        now,
        from: values.since === undefined ? undefined : parseSince(values.since, now),
      });
      if (values.json) {
        console.log(JSON.stringify(r, null, 2));
        return 0;
      }
      if (!r.jobs) {
        console.log(
          `No job recorded in ${where}${values.since ? ` since ${values.since}` : ''}: nothing to count.`,
        );
        return 0;
      }
      const f = r.fleet;
      const lines = [
        `${r.jobs} job(s) in ${where}: ${f.count} interruption(s) over ${Math.round(f.gpu_hours).toLocaleString('en-US')} GPU-hours (${f.node_days.toFixed(1)} node-days up)`,
        table(
          [
            by,
            ...(by === 'cause' ? ['group'] : []),
            'count',
            'per 1k node-days [95%]',
            'per 10⁶ GPU-h [95%]',
            '',
          ],
          [...r.rows, f].map((x) => [
            x.key,
            ...(by === 'cause' ? [x.key === 'fleet' ? '' : (x.group ?? '')] : []),
            x.count,
            rate(x.per_1k_node_days),
            rate(x.per_1m_gpu_hours),
            x.few ? 'few events: wide interval' : '',
          ]),
        ),
      ];
      if (r.mtbf)
        lines.push(
          `MTBF for a job of ${r.mtbf.gpus.toLocaleString('en-US')} GPUs: ${r.mtbf.hours === null ? `no failure recorded (at least ${dur(r.mtbf.lo * 3600)} at 95%)` : `${dur(r.mtbf.hours * 3600)} [95%: ${dur(r.mtbf.lo * 3600)}, ${dur(r.mtbf.hi === null ? null : r.mtbf.hi * 3600)}]`}`,
        );
      const ettr = r.timelines.filter((t) => t.ettr !== null);
      if (ettr.length)
        lines.push(
          `ETTR per job: ${ettr.map((t) => `${t.job} ${pct(t.ettr!)} (${t.interruptions.length} interruptions)`).join(', ')}`,
        );
      for (const n of r.notes) lines.push(`note: ${n}`);
      console.log(lines.join('\n'));
      return 0;
    } finally {
      await store.close();
    }
  },
};
