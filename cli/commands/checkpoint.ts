import { adviseCheckpoint } from '../../analytics/checkpoint.js';
import { RankwatchError } from '../../core/errors.js';
import { CHECKPOINT_INTERVAL_DEFAULTS } from '../../detectors/checkpoint/interval.js';
import type { Finding } from '../../schema/finding.js';
import type { JobAdviceResult } from '../../store/failure-queries.js';
import { type Command, defineOptions, optionsHelp, parseOptions } from '../args.js';
import { SOURCE_OPTIONS, SOURCE_OPTIONS_HELP, withSource } from '../read-source.js';
import { adviceLines, dur, parseSince, pct } from './research-format.js';

const CHECKPOINT_OPTIONS = defineOptions({
  'save-s': { kind: 'number', arg: 'S', help: 'blocking part of one save, seconds (δ)' },
  'save-total-s': {
    kind: 'number',
    arg: 'T',
    help: 'the whole save when it is asynchronous (the rest is counted as rollback)',
  },
  'mtbf-h': {
    kind: 'number',
    arg: 'H',
    help: 'mean time between failures of the job at its size, hours (M)',
  },
  'restart-s': {
    kind: 'number',
    arg: 'R',
    defaultText: '0',
    help: 'time from a failure until training runs again, seconds',
  },
  'interval-s': { kind: 'number', arg: 'I', help: 'the interval in use, compute seconds between saves' },
  job: {
    kind: 'string',
    arg: 'ID',
    help: "advise a recorded job from its own saves, restarts and interruptions (the fleet's rate for its size when it has none); the flags above override",
  },
  since: {
    kind: 'string',
    arg: 'WHEN',
    help: 'only what was recorded since (ISO time, epoch ms, or 7d / 36h / 90m)',
  },
  'max-loss-pct': {
    kind: 'number',
    arg: 'P',
    default: CHECKPOINT_INTERVAL_DEFAULTS.maxLossPct,
    help: 'a checkpoint_interval finding when the current interval gives up more than P% of goodput',
  },
});

const OPTIONS = defineOptions({ ...CHECKPOINT_OPTIONS, ...SOURCE_OPTIONS });

export const checkpoint: Command = {
  name: 'checkpoint',
  usage: `rankwatch checkpoint --save-s S --mtbf-h H [--restart-s R] [--interval-s I] [--save-total-s T] [--json]
rankwatch checkpoint --job ID (--api URL --token T | --data DIR | --clickhouse-url URL) [--since WHEN] [--json]

Checkpoint-interval advice: Young's √(2δM) and Daly's higher-order interval (M when δ ≥ 2M),
the expected efficiency at the current and the recommended interval, and how both move when the
failure rate is halved or doubled. Intervals are compute time between saves (N steps × step time).

${optionsHelp(CHECKPOINT_OPTIONS)}
  (with --job: the figures of GET /v1/jobs/ID/checkpoint-advice, over the API or the store)
${SOURCE_OPTIONS_HELP}`,
  options: OPTIONS,
  async run(argv) {
    const { values } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const mtbfH = values['mtbf-h'];
    const given = {
      saveS: values['save-s'],
      mtbfS: mtbfH === undefined ? undefined : mtbfH * 3600,
      restartS: values['restart-s'],
      intervalS: values['interval-s'],
    };
    const cfg = { maxLossPct: values['max-loss-pct'] };
    if (values.job === undefined) {
      if (given.saveS === undefined || given.mtbfS === undefined)
        throw new RankwatchError(
          'RANKWATCH_ERR_USAGE',
          'give --save-s and --mtbf-h, or --job ID with --api/--data/--clickhouse-url',
        );
      const advice = adviseCheckpoint({ ...given, saveTotalS: values['save-total-s'] });
      if (values.json) console.log(JSON.stringify({ advice }, null, 2));
      else console.log(adviceLines(advice).join('\n'));
      return advice.ok ? 0 : 1;
    }
    // The same route a client of the API calls, over HTTP (--api) or in-process over the store.
    const q = new URLSearchParams({ max_loss_pct: String(cfg.maxLossPct) });
    const param = { saveS: 'save_s', restartS: 'restart_s', intervalS: 'interval_s' } as const;
    for (const [k, name] of Object.entries(param)) {
      const v = given[k as keyof typeof param];
      if (v !== undefined) q.set(name, String(v));
    }
    if (given.mtbfS !== undefined) q.set('mtbf_h', String(given.mtbfS / 3600));
    if (values.since !== undefined) q.set('from', String(parseSince(values.since, Date.now())));
    const { r, where } = await withSource(values, async (s) => ({
      r: await s.get<JobAdviceResult & { finding: Finding | null }>(
        `/v1/jobs/${encodeURIComponent(values.job!)}/checkpoint-advice?${q}`,
      ),
      where: s.where,
    }));
    const finding = r.finding;
    if (values.json) {
      console.log(
        JSON.stringify(
          { job: r.job, inputs: r.inputs, advice: r.advice, timeline: r.timeline, finding },
          null,
          2,
        ),
      );
      return r.advice.ok ? 0 : 1;
    }
    const t = r.timeline;
    const lostS = t.interruptions.reduce((s, i) => s + i.lost_ms, 0) / 1000;
    const lines = [
      `Job ${r.job} (${where}): ${t.gpus} GPUs ${t.gpu_model}, up ${dur(t.up_ms / 1000)}, ${t.interruptions.length} interruption(s), ${t.saves} save(s), time lost ${dur(lostS)}, ETTR ${t.ettr === null ? '-' : pct(t.ettr)}`,
      'Inputs:',
      `  save δ      ${dur(r.inputs.saveS.value).padEnd(10)} from ${r.inputs.saveS.source}`,
      `  MTBF M      ${dur(r.inputs.mtbfS.value).padEnd(10)} from ${r.inputs.mtbfS.source}`,
      `  restart R   ${dur(r.inputs.restartS.value ?? 0).padEnd(10)} from ${r.inputs.restartS.source}`,
      `  current τ   ${(r.inputs.intervalS.value === undefined ? '-' : dur(r.inputs.intervalS.value)).padEnd(10)} from ${r.inputs.intervalS.source}`,
      ...adviceLines(r.advice),
    ];
    if (finding) lines.push(`finding checkpoint_interval: ${finding.summary}`);
    for (const n of t.notes) lines.push(`note: ${n}`);
    console.log(lines.join('\n'));
    return r.advice.ok ? 0 : 1;
  },
};
