import { RATE_BY } from '../../analytics/rates.js';
import type { FailuresResult } from '../../store/failure-queries.js';
import { type Command, defineOptions, optionsHelp, parseOptions } from '../args.js';
import { SOURCE_OPTIONS, SOURCE_OPTIONS_HELP, withSource } from '../read-source.js';
import { table } from '../table.js';
import { dur, parseSince, pct, rate } from './research-format.js';

const FAILURES_OPTIONS = defineOptions({
  since: {
    kind: 'string',
    arg: 'WHEN',
    help: 'only what was recorded since (ISO time, epoch ms, or 7d / 36h / 90m)',
  },
  by: { kind: 'enum', values: RATE_BY, arg: 'KEY', default: 'cause', help: `rows per ${RATE_BY.join(', ')}` },
  gpus: {
    kind: 'number',
    integer: true,
    min: 1,
    defaultText: 'the largest job recorded',
    help: 'job size for the MTBF',
  },
});

const OPTIONS = defineOptions({ ...FAILURES_OPTIONS, ...SOURCE_OPTIONS });

export const failures: Command = {
  name: 'failures',
  usage: `rankwatch failures (--api URL --token T | --data DIR | --clickhouse-url URL) [--since WHEN] [--by ${RATE_BY.join('|')}] [--gpus N] [--json]

Recorded interruptions as failure rates: counts, exposure (GPU-hours and node-days while jobs
were up), rates per 1,000 node-days and per 10⁶ GPU-hours with exact Poisson 95% intervals, and
the MTBF a job of N GPUs can expect, with its interval.

${optionsHelp(FAILURES_OPTIONS)}
  (--json prints rows, fleet, mtbf, and each job's interruption timeline: GET /v1/failures)
${SOURCE_OPTIONS_HELP}`,
  options: OPTIONS,
  async run(argv) {
    const { values } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const by = values.by;
    const gpus = values.gpus;
    const q = new URLSearchParams({ by });
    if (gpus !== undefined) q.set('gpus', String(gpus));
    if (values.since !== undefined) q.set('from', String(parseSince(values.since, Date.now())));
    // The same route a client of the API calls, over HTTP (--api) or in-process over the store.
    const { r, where } = await withSource(values, async (s) => ({
      r: await s.get<FailuresResult>(`/v1/failures?${q}`),
      where: s.where,
    }));
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
  },
};
