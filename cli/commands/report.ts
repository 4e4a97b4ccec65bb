import { RankwatchError } from '../../core/errors.js';
import { costliest, costText, mfuText } from '../../core/figures.js';
import type { Finding } from '../../schema/finding.js';
import type { SlowGpu } from '../../schema/output.js';
import type { Store } from '../../store/store.js';
import { type Command, defineOptions, optionsHelp, parseOptions } from '../args.js';
import { sparkline } from '../chart.js';
import {
  type ReadSource,
  SOURCE_OPTIONS,
  SOURCE_OPTIONS_HELP,
  sourceOverStore,
  withSource,
} from '../read-source.js';
import { table } from '../table.js';

interface Summary {
  job: string;
  status: string;
  first_ts: number;
  last_ts: number;
  ranks: number;
  world_size: number;
  gpu_model: string;
  last_step: number;
  mfu_now: number | null;
  mfu_avg: number | null;
  step_ms: number | null;
  compute_ms: number | null;
  tokens_per_s: number | null;
  hosts: string[];
  findings: Finding[];
}
interface MfuPoint {
  ts: number;
  mfu: number;
  step_ms: number;
  tokens_per_s: number | null;
}
interface StepPoint {
  ts: number;
  step_ms: number;
  compute_p50_ms: number;
  compute_max_ms: number;
}

/** A finding as GET /v1/findings gives it: its latest state, with who acked or silenced it. */
export type Incident = Finding & {
  acked_by?: string;
  acked_at?: number;
  silenced_until?: number;
  silenced_by?: string;
};

export interface JobReport {
  summary: Summary;
  /** Every incident of the job in its latest state, open and resolved (absent from servers before it). */
  findings?: Incident[];
  /** Width of the chart buckets, seconds. */
  step_s: number;
  mfu: MfuPoint[];
  steps: StepPoint[];
  /** The job's slowest GPUs (its latest ranking), the one it waits for first. */
  slowGpus: SlowGpu[];
}

export const pct = (v: number | null | undefined) => mfuText(v);
export const cost = (f: Finding) => costText(f.est_cost_pct);

/** Who acked or silenced an incident: `acked by ops; silenced by ops until 2026-12-03 18:00 UTC`, or '-'. */
export function ackText(f: Incident): string {
  const parts = [
    f.acked_by ? `acked by ${f.acked_by}` : '',
    f.silenced_until !== undefined
      ? `silenced${f.silenced_by ? ` by ${f.silenced_by}` : ''} until ${new Date(f.silenced_until).toISOString().slice(0, 16).replace('T', ' ')} UTC`
      : '',
  ].filter(Boolean);
  return parts.length ? parts.join('; ') : '-';
}
export const place = (f: Finding) =>
  `${f.host}${f.gpu !== undefined ? `/${f.gpu}` : ''}${f.rank !== undefined ? ` rank ${f.rank}` : ''}${f.peer_host ? ` ↔ ${f.peer_host}` : ''}`;

export function age(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  if (s < 172_800) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86_400)} d ago`;
}

const fmt = (v: number | null | undefined, digits = 0, unit = '') =>
  v === null || v === undefined
    ? '-'
    : `${v.toLocaleString('en-US', { maximumFractionDigits: digits })}${unit}`;

/** What the report shows for a job, through any read source (the API, or the store in-process). */
export async function fetchReport(s: ReadSource, job: string, stepArg?: string): Promise<JobReport> {
  const j = encodeURIComponent(job);
  const summary = await s.get<Summary>(`/v1/jobs/${j}`);
  // By default about 60 buckets over the job's life: one per chart column.
  const step = stepArg ?? String(Math.max(10, Math.ceil((summary.last_ts - summary.first_ts) / 60_000)));
  const [mfu, steps, slow, found] = await Promise.all([
    s.get<{ step_s: number; points: MfuPoint[] }>(`/v1/jobs/${j}/mfu?step=${step}`),
    s.get<{ points: StepPoint[] }>(`/v1/jobs/${j}/steps?step=${step}`),
    // A server older than the ranking has no such route: the report goes on without it.
    s
      .get<{ gpus: SlowGpu[] }>(`/v1/jobs/${j}/slow-gpus?limit=${SLOW_GPUS_SHOWN}`)
      .catch((err: { code?: string }) => {
        if (err.code === 'RANKWATCH_ERR_NOT_FOUND') return { gpus: [] };
        throw err;
      }),
    // Open and resolved, with who acked or silenced them.
    s.get<{ findings: Incident[] }>(`/v1/findings?job=${j}&limit=1000`),
  ]);
  return {
    summary,
    findings: found.findings,
    step_s: mfu.step_s,
    mfu: mfu.points,
    steps: steps.points,
    slowGpus: slow.gpus,
  };
}

/** GPUs the report's slowest-GPUs section lists. */
const SLOW_GPUS_SHOWN = 8;

/** The slowest GPUs: the one the job waits for first, with what replacing each would buy. */
function slowGpuSection(gpus: SlowGpu[], out: string[]): void {
  if (gpus.length === 0) {
    out.push('Slowest GPUs: no ranking yet (a job is ranked once it has run ~80 steps).');
    return;
  }
  out.push(`Slowest GPUs (the job's latest ranking, at step ${gpus[0].step})`);
  out.push(
    table(
      ['gpu', 'rank', 'stage', 'vs stage peers', 'replacing buys', 'GPU-h/day'],
      gpus.map((g) => [
        `${g.host}/${g.gpu}`,
        String(g.rank),
        String(g.stage),
        `${g.slowdown_pct > 0 ? '+' : ''}${g.slowdown_pct.toFixed(1)}%`,
        `${g.cost_pct.toFixed(2)}%`,
        g.gpu_hours_per_day.toFixed(1),
      ]),
    ),
  );
  const top = gpus[0];
  out.push(
    top.cost_pct > 0
      ? `  The step waits for its slowest GPU: replacing ${top.host}/${top.gpu} would buy ~${top.cost_pct.toFixed(1)}% of the job's throughput; the others cost nothing while it remains.`
      : '  None sets the pace: replacing one would buy nothing while the slowest remains.',
  );
}

/** Evidence as `key=value` pairs, numbers rounded, nested values as compact JSON. */
function evidence(e: Record<string, unknown>): string {
  return Object.entries(e)
    .map(([k, v]) => {
      const s =
        typeof v === 'number'
          ? String(Math.round(v * 1000) / 1000)
          : typeof v === 'string'
            ? v
            : JSON.stringify(v);
      return `${k}=${s.length > 60 ? `${s.slice(0, 57)}...` : s}`;
    })
    .join(' ');
}

/** The report as text: headline figures, charts, findings by cost with evidence, the hosts involved. */
export function renderReport(r: JobReport): string {
  const s = r.summary;
  const out: string[] = [];
  const span = `${new Date(s.first_ts).toISOString().slice(0, 16).replace('T', ' ')} to ${new Date(s.last_ts).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
  out.push(
    `Job ${s.job}: ${s.status}, ${s.ranks} ranks${s.world_size && s.world_size !== s.ranks ? ` of ${s.world_size}` : ''}${s.gpu_model ? ` on ${s.gpu_model}` : ''}, step ${s.last_step}, ${span}`,
  );
  out.push('');
  // An MFU over 100% cannot be: the job's declared model or GPU is wrong, not the job fast.
  const mfuBad = (v: number | null) => v !== null && (v > 1 || v < 0);
  if (mfuBad(s.mfu_now) || mfuBad(s.mfu_avg))
    out.push(
      `MFU ${pct(s.mfu_now)} cannot be true: check the job event's gpu_model, dtype and model (or flops_per_step).`,
    );
  else out.push(`MFU         ${pct(s.mfu_now)} now, ${pct(s.mfu_avg)} average`);
  out.push(
    `tokens/s    ${fmt(s.tokens_per_s)}${s.tokens_per_s === null ? ' (the job reports no tokens)' : ''}`,
  );
  out.push(
    `step time   ${fmt(s.step_ms, 1, ' ms')} wall, ${fmt(s.compute_ms, 1, ' ms')} compute (last 5 minutes)`,
  );
  out.push('');
  if (r.mfu.length >= 2 || r.steps.length >= 2) out.push(`Over time (${r.step_s} s buckets, oldest left)`);
  const chart = (label: string, values: number[], show: (v: number) => string) => {
    if (values.length < 2) return;
    out.push(
      `  ${label.padEnd(11)} ${sparkline(values)}  ${show(Math.min(...values))} .. ${show(Math.max(...values))}`,
    );
  };
  if (!mfuBad(s.mfu_avg))
    chart(
      'MFU',
      r.mfu.map((p) => p.mfu),
      (v) => pct(v),
    );
  chart(
    'tokens/s',
    r.mfu.flatMap((p) => (p.tokens_per_s === null ? [] : [p.tokens_per_s])),
    (v) => fmt(v),
  );
  chart(
    'step ms',
    r.steps.map((p) => p.step_ms),
    (v) => fmt(v, 1),
  );
  chart(
    'slowest ms',
    r.steps.map((p) => p.compute_max_ms),
    (v) => fmt(v, 1),
  );
  out.push('');
  const all: Incident[] = r.findings ?? s.findings;
  const open = all.filter((f) => f.state !== 'resolved').sort(costliest);
  const resolved = all.filter((f) => f.state === 'resolved').sort(costliest);
  if (open.length === 0) out.push('No open findings.');
  else {
    out.push(`Open findings, costliest first (${open.length})`);
    out.push(
      table(
        ['cost', 'type', 'severity', 'where', 'action', 'ack / silence', 'summary'],
        open.map((f) => [cost(f), f.type, f.severity, place(f), f.action, ackText(f), f.summary]),
      ),
    );
    for (const f of open) out.push(`  ${f.type} ${place(f)}: ${evidence(f.evidence)}`);
  }
  if (resolved.length) {
    out.push('');
    // Each with the summary and cost it had while open, and why it ended.
    out.push(`Resolved findings, costliest first (${resolved.length})`);
    out.push(
      table(
        ['cost', 'type', 'where', 'ack / silence', 'summary', 'resolved'],
        resolved.map((f) => [cost(f), f.type, place(f), ackText(f), f.summary, f.resolution ?? '-']),
      ),
    );
  }
  out.push('');
  slowGpuSection(r.slowGpus ?? [], out);
  out.push('');
  const flagged = new Map<string, Finding[]>();
  for (const f of open)
    for (const h of [f.host, f.peer_host]) if (h) flagged.set(h, [...(flagged.get(h) ?? []), f]);
  out.push(`Hosts (${s.hosts.length})`);
  const hostRows = s.hosts
    .map((h) => [h, (flagged.get(h) ?? []).map((f) => f.type).join(', ') || 'ok'])
    .sort((a, b) => Number(b[1] !== 'ok') - Number(a[1] !== 'ok') || (a[0] < b[0] ? -1 : 1));
  out.push(table(['host', 'open findings'], hostRows));
  return out.join('\n');
}

/** Each job's report over an open store (what `replay` ends with); a job without steps is skipped. */
export async function storedReports(store: Store, jobs: Iterable<string>): Promise<string> {
  const s = await sourceOverStore(store, '');
  try {
    const out: string[] = [];
    for (const job of jobs) {
      try {
        out.push(renderReport(await fetchReport(s, job)));
      } catch (err) {
        if ((err as { code?: string }).code !== 'RANKWATCH_ERR_NOT_FOUND') throw err;
      }
    }
    return out.join('\n\n');
  } finally {
    await s.close();
  }
}

const REPORT_OPTIONS = defineOptions({
  step: {
    kind: 'string',
    arg: 'S',
    defaultText: 'about 60 over the job',
    help: 'chart bucket: seconds, or 30s, 5m, 1h',
  },
});

const OPTIONS = defineOptions({ ...REPORT_OPTIONS, ...SOURCE_OPTIONS });

export const report: Command = {
  name: 'report',
  usage: `rankwatch report JOB [options]

One job: MFU and tokens/s (now, average, and a text chart over time), step time, the open
findings ranked by what they cost with their evidence, the slowest GPUs (the one the job waits
for first, with what replacing each would buy), and the hosts involved.

${optionsHelp(REPORT_OPTIONS)}
${SOURCE_OPTIONS_HELP}`,
  options: OPTIONS,
  async run(argv) {
    const { values, positionals } = parseOptions(argv, OPTIONS, { positionals: true });
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const [job, ...extra] = positionals;
    if (!job || extra.length > 0)
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        'give one job id, e.g. rankwatch report llama-70b-run3 (rankwatch jobs lists them)',
      );
    const r = await withSource(values, (s) => fetchReport(s, job, values.step));
    console.log(values.json ? JSON.stringify(r, null, 2) : renderReport(r));
    return 0;
  },
};
