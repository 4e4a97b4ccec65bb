/**
 * nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf,
 * broadcast_perf, sendrecv_perf, …) → one `check` event per run: the hosts it ran on, every row,
 * and what the run says about data integrity. Built for output as it arrives: launcher and
 * shipper prefixes (mpirun --tag-output, srun -l, kubectl logs --timestamps), NCCL INFO lines
 * between rows, CRLF, tabs, a run cut off before its summary. Columns are read from the table
 * header, so older layouts (no redop/root, `error` instead of `#wrong`) parse the same way.
 */
import type { CheckEvent as K } from '../../schema/events.js';
import { type Open, type ParseProblem, problem, splitLines } from './problems.js';

type CheckEvent = Open<K>;

export interface NcclTestRow {
  bytes: number;
  count: number;
  dtype: string;
  redop?: string;
  root?: number;
  inPlace: boolean;
  timeUs: number;
  algbwGBs: number;
  busbwGBs: number;
  /** Wrong elements (`#wrong` column; undefined when validation was off: "N/A"). */
  wrong?: number;
  /** Older layouts' `error` column: the largest relative error seen, not a count. */
  maxRelError?: number;
}

export interface NcclTestResult {
  /** Binary name when the output says it ("all_reduce_perf"), else undefined. */
  test?: string;
  ranks: { rank: number; host: string; device: number; gpuName?: string }[];
  hosts: string[];
  rows: NcclTestRow[];
  avgBusBwGBs?: number;
  outOfBounds?: number;
  /** The run reached its `# Avg bus bandwidth` summary; false when it was cut off. */
  complete: boolean;
  problems: ParseProblem[];
}

const DEFAULT_COLUMNS = [
  'size',
  'count',
  'type',
  'redop',
  'root',
  'time',
  'algbw',
  'busbw',
  '#wrong',
  'time',
  'algbw',
  'busbw',
  '#wrong',
];
const RANK_LINE =
  /^#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$/;
// `kubectl logs --timestamps`: RFC 3339 time and one space; the kubelet's own container log files
// (what node log shippers read) add the stream and a full/partial flag: "… stdout F ".
const K8S_TS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) (?:(?:stdout|stderr) [FP] )?/;
// `srun -l` / `srun --label`: the task id, a colon and a space.
const SRUN_LABEL = /^\s*\d+: /;
// `mpirun --timestamp-output` puts the time right before the tag: "Thu Aug 27 01:33:12 2020[1,0]<stdout>:".
const MPI_TIME = /^[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \d{4}(?=\[)/;
// `mpirun --tag-output`: "[jobid,rank]<stdout>:", at the start and wherever a partial line was flushed.
const MPI_TAG = /\[(?:[^\][\s]*@)?\d+,\d+\]<(?:stdout|stderr|stddiag)>: ?/g;

/** The line as the tool printed it, without launcher and log-shipper prefixes. */
export function stripPrefixes(line: string): string {
  let s = line.replace(K8S_TS, '');
  s = s.replace(SRUN_LABEL, '');
  return s.replace(MPI_TIME, '').replace(MPI_TAG, '');
}

/** A line that starts a new run (so rows before it belong to an earlier, cut-off run). */
export function startsRun(line: string): boolean {
  return /^#?\s*(?:nThread\s+\d|Collective test starting)/.test(stripPrefixes(line).trim());
}

export function isRunSummary(line: string): boolean {
  return /Avg bus bandwidth\s*:/.test(line);
}

export function parseNcclTests(text: string): NcclTestResult {
  const res: NcclTestResult = { ranks: [], hosts: [], rows: [], problems: [], complete: false };
  let columns: string[] | undefined;
  const lines = splitLines(text);
  for (let i = 0; i < lines.length; i++) {
    const line = stripPrefixes(lines[i]).trim();
    if (line === '') continue;
    const body = line.startsWith('#') ? line.slice(1).trim() : line;
    const test = /Collective test starting:\s*(\S+)/.exec(body) ?? /^(\w+_perf)\b/.exec(body);
    if (test) res.test = test[1];
    const r = RANK_LINE.exec(line);
    if (r) {
      res.ranks.push({ rank: Number(r[1]), host: r[2], device: Number(r[3]), gpuName: r[4] || undefined });
      continue;
    }
    const cells = body.split(/\s+/);
    if (cells[0] === 'size' && cells.includes('busbw')) {
      columns = cells.map((c) => (c === 'error' ? 'error' : c === 'wrong' ? '#wrong' : c));
      continue;
    }
    const avg = /Avg bus bandwidth\s*:\s*([\d.]+(?:e[+-]?\d+)?)/i.exec(body);
    if (avg) {
      res.avgBusBwGBs = Number(avg[1]);
      res.complete = true;
      continue;
    }
    const oob = /Out of bounds values\s*:\s*(\d+)/.exec(body);
    if (oob) {
      res.outOfBounds = Number(oob[1]);
      continue;
    }
    // Only a line that starts with two integers is a row; NCCL INFO/WARN lines, launcher
    // chatter and comments are not problems of this parser.
    if (line.startsWith('#') || !/^\d+$/.test(cells[0]) || !/^\d+$/.test(cells[1] ?? '')) continue;
    const rows = parseRow(cells, columns ?? DEFAULT_COLUMNS);
    if (typeof rows === 'string') res.problems.push(problem(i + 1, rows, lines[i]));
    else res.rows.push(...rows);
  }
  res.hosts = [...new Set(res.ranks.map((r) => r.host))].sort();
  const seen = new Set<number>();
  const twice = res.ranks.find((r) => seen.size === seen.add(r.rank).size);
  // Every process listing itself as rank 0 means each ran a test of its own (nccl-tests built
  // without MPI=1 and started by mpirun): the rows are not one multi-host run.
  if (twice)
    res.problems.push(
      problem(
        0,
        `rank ${twice.rank} listed twice: each process ran its own test (nccl-tests built without MPI=1?)`,
        '',
      ),
    );
  return res;
}

function parseRow(cells: string[], columns: string[]): NcclTestRow[] | string {
  if (cells.length !== columns.length)
    return `expected ${columns.length} columns, got ${cells.length} (a cut-off row?)`;
  const at = (name: string, nth = 0) => {
    let seen = 0;
    for (let i = 0; i < columns.length; i++) if (columns[i] === name && seen++ === nth) return cells[i];
    return undefined;
  };
  const num = (v: string | undefined) => (v === undefined ? Number.NaN : Number(v));
  const bytes = num(at('size'));
  const count = num(at('count'));
  const out: NcclTestRow[] = [];
  for (const [nth, inPlace] of [
    [0, false],
    [1, true],
  ] as const) {
    if (at('time', nth) === undefined) continue;
    const timeUs = num(at('time', nth));
    const algbw = num(at('algbw', nth));
    const busbw = num(at('busbw', nth));
    if (![timeUs, algbw, busbw].every((v) => Number.isFinite(v) && v >= 0))
      return 'time/algbw/busbw is not a number';
    const wrong = num(at('#wrong', nth));
    const relErr = num(at('error', nth));
    const redop = at('redop');
    const root = at('root');
    out.push({
      bytes,
      count,
      dtype: at('type') ?? 'unknown',
      ...(redop !== undefined && redop !== 'none' ? { redop } : {}),
      ...(root !== undefined && root !== '-1' ? { root: Number(root) } : {}),
      inPlace,
      timeUs,
      algbwGBs: algbw,
      busbwGBs: busbw,
      ...(Number.isInteger(wrong) && wrong >= 0 ? { wrong } : {}),
      ...(Number.isFinite(relErr) && relErr >= 0 ? { maxRelError: relErr } : {}),
    });
  }
  return out;
}

/**
 * One run as a v1 `check` event (tool `nccl-tests`). `ok` is false when the run was cut off,
 * any row has wrong elements, values were out of bounds, or the best bus bandwidth is below a
 * configured expectation; the detector judges it against the best known runs as well.
 */
export function ncclTestCheck(
  r: NcclTestResult,
  ctx: { ts: number; job?: string; test?: string; host?: string; expectedGbs?: number },
): CheckEvent | undefined {
  if (r.rows.length === 0) return undefined;
  const test = r.test ?? ctx.test ?? 'unknown_perf';
  const wrong = r.rows.some((x) => x.wrong !== undefined)
    ? r.rows.reduce((s, x) => s + (x.wrong ?? 0), 0)
    : undefined;
  const busbw = Math.max(...r.rows.map((x) => x.busbwGBs));
  const relErrs = r.rows.flatMap((x) => (x.maxRelError !== undefined ? [x.maxRelError] : []));
  const corrupt = (wrong ?? 0) > 0 || (r.outOfBounds ?? 0) > 0;
  const belowExpected = ctx.expectedGbs !== undefined && busbw < ctx.expectedGbs;
  const hosts = r.hosts.length ? r.hosts : ctx.host ? [ctx.host] : [];
  const gpuNames = [...new Set(r.ranks.flatMap((x) => (x.gpuName ? [x.gpuName] : [])))];
  return {
    v: 1,
    kind: 'check',
    ts: ctx.ts,
    host: hosts[0] ?? 'unknown',
    ...(ctx.job ? { job: ctx.job } : {}),
    tool: 'nccl-tests',
    ok: r.complete && !corrupt && !belowExpected,
    hosts,
    busbw_gbs: busbw,
    ...(ctx.expectedGbs !== undefined ? { expected_gbs: ctx.expectedGbs } : {}),
    test,
    nranks: Math.max(1, r.ranks.length),
    ...(gpuNames.length ? { gpu_name: gpuNames.join(' + ') } : {}),
    complete: r.complete,
    ...(wrong !== undefined ? { wrong } : {}),
    ...(r.outOfBounds !== undefined ? { out_of_bounds: r.outOfBounds } : {}),
    ...(relErrs.length ? { max_rel_error: Math.max(...relErrs) } : {}),
    ...(r.avgBusBwGBs !== undefined ? { avg_busbw_gbs: r.avgBusBwGBs } : {}),
    rows: r.rows.map((x) => ({
      bytes: x.bytes,
      dtype: x.dtype,
      ...(x.redop ? { redop: x.redop } : {}),
      in_place: x.inPlace,
      time_us: x.timeUs,
      algbw_gbs: x.algbwGBs,
      busbw_gbs: x.busbwGBs,
      ...(x.wrong !== undefined ? { wrong: x.wrong } : {}),
    })),
  };
}
