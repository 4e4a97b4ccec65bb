/**
 * nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf,
 * broadcast_perf, sendrecv_perf, …) → one `check` event per run: the hosts it ran on, every row,
 * and what the run says about data integrity. Built for output as it arrives: launcher and
 * shipper prefixes (mpirun --tag-output, MPICH/Intel MPI rank tags, srun -l, kubectl logs
 * --timestamps), rank tags inside rows, NCCL INFO lines between and inside rows, CRLF, tabs, a run
 * cut off before its summary. A row is found by its size/count/type columns wherever they stand in
 * the line; its columns come from the table header, or from the row itself when the header is cut
 * off. A run of which no row can be read is one problem with its reason.
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

const RANK_LINE =
  /(?:^|[\s#])Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$/;
// `kubectl logs --timestamps`: RFC 3339 time and one space; the kubelet's own container log files
// (what node log shippers read) add the stream and a full/partial flag: "… stdout F ".
const K8S_TS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) (?:(?:stdout|stderr) [FP] )?/;
// `srun -l` / `srun --label`: the task id, a colon and a space.
const SRUN_LABEL = /^\s*\d+: /;
// `mpirun --timestamp-output` puts the time right before the tag: "Thu Aug 27 01:33:12 2020[1,0]<stdout>:".
const MPI_TIME = /^[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \d{4}(?=\[)/;
// Rank tags: Open MPI `mpirun --tag-output` "[jobid,rank]<stdout>:", MPICH / Intel MPI `-l` or
// `-prepend-rank` "[0]". Each flushed piece of a line gets one, so they also sit inside rows,
// glued to the cell before them ("-1[0]").
const TAG = /\[(?:[^\][\s]*@)?\d+,\d+\]<(?:stdout|stderr|stddiag)>: ?|\[\d+\]/g;
const LEADING_TAGS = /^(?:\s*(?:\[(?:[^\][\s]*@)?\d+,\d+\]<(?:stdout|stderr|stddiag)>:|\[\d+\]) ?)+/;

/** Data types and reduction operators nccl-tests prints (src/common.cu, NCCL 1 and 2 builds). */
const TYPES = new Set([
  'int8',
  'uint8',
  'int32',
  'uint32',
  'int64',
  'uint64',
  'half',
  'float',
  'double',
  'bfloat16',
  'f8e4m3',
  'f8e5m2',
  'char',
  'int',
]);
const REDOPS = new Set(['sum', 'prod', 'max', 'min', 'avg', 'mulsum', 'premulsum', 'none']);
const INT = /^\d+$/;
const NUMBER = /^-?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?$/i;
const isValue = (t: string) => NUMBER.test(t) || t === 'N/A';
const isCell = (t: string) => isValue(t) || TYPES.has(t) || REDOPS.has(t);

/** The line as the tool printed it, without launcher and log-shipper prefixes or rank tags. */
export function stripPrefixes(line: string): string {
  let s = line.replace(K8S_TS, '');
  s = s.replace(SRUN_LABEL, '');
  return s.replace(MPI_TIME, '').replace(LEADING_TAGS, '').replace(TAG, ' ');
}

/** A line that starts a new run (so rows before it belong to an earlier, cut-off run). */
export function startsRun(line: string): boolean {
  return /(?:^|[\s#])(?:nThread\s+\d|Collective test starting)/.test(stripPrefixes(line));
}

export function isRunSummary(line: string): boolean {
  return /Avg bus bandwidth\s*:/.test(line);
}

/** A data type: one nccl-tests prints, or a new one's name followed by a redop or a number. */
const isType = (w: string, next: string | undefined) =>
  TYPES.has(w) ||
  (/^[a-z][a-z0-9_]*$/.test(w) && next !== undefined && (REDOPS.has(next) || NUMBER.test(next)));

/** Where a row's size/count/type run starts among the line's words, from `from` on (-1: none). */
function rowStart(words: string[], from = 0): number {
  for (let i = from; i + 2 < words.length; i++)
    if (INT.test(words[i]) && INT.test(words[i + 1]) && isType(words[i + 2], words[i + 3])) return i;
  return -1;
}

/**
 * Columns of a row printed without its header, from the row itself: nccl-tests prints size,
 * count, type, then redop (a name) and root (%6i: -1 or a rank, never a time, which has a decimal
 * point below 10000 µs and five digits above), then time, algbw, busbw and #wrong (or the older
 * `error`, a relative error like 5e-07) for out-of-place and for in-place.
 */
function inferColumns(cells: string[]): string[] {
  const cols = ['size', 'count', 'type'];
  if (REDOPS.has(cells[3])) cols.push('redop');
  const root = cells[cols.length];
  if (root === undefined ? cols.includes('redop') : /^-?\d{1,4}$/.test(root)) cols.push('root');
  const first = cols.length;
  for (const g of [0, 1]) {
    const last = cells[first + g * 4 + 3];
    cols.push('time', 'algbw', 'busbw', last !== undefined && /e-|^0e\+0+$/i.test(last) ? 'error' : '#wrong');
  }
  return cols;
}

/** Markers of nccl-tests output: a block with one of them and no row is a run that could not be read. */
const RUN_MARKER =
  /nThread\s+\d|Collective test starting|Avg bus bandwidth|Out of bounds values|(?:^|\s)size\s+count\s+type/;

export function parseNcclTests(text: string): NcclTestResult {
  const res: NcclTestResult = { ranks: [], hosts: [], rows: [], problems: [], complete: false };
  let columns: string[] | undefined;
  let isRun = false;
  /** A row whose start was read and whose rest has not come yet (pieces flushed apart). */
  let pending: { line: number; raw: string; cells: string[] } | undefined;
  const finishRow = (force: boolean) => {
    if (!pending) return;
    const cols = columns ?? inferColumns(pending.cells);
    if (pending.cells.length < cols.length && !force) return;
    const rows =
      pending.cells.length === cols.length
        ? parseRow(pending.cells, cols)
        : `expected ${cols.length} columns, got ${pending.cells.length} (a cut-off row?)`;
    if (typeof rows === 'string') res.problems.push(problem(pending.line, rows, pending.raw));
    else res.rows.push(...rows);
    pending = undefined;
  };
  const lines = splitLines(text);
  for (let i = 0; i < lines.length; i++) {
    const line = stripPrefixes(lines[i]).trim();
    if (line === '') continue;
    if (RUN_MARKER.test(line)) isRun = true;
    const hash = line.indexOf('#');
    const body = hash >= 0 ? line.slice(hash + 1).trim() : line;
    const test = /Collective test starting:\s*(\S+)/.exec(line) ?? /^(\w+_perf)\b/.exec(body);
    if (test) res.test = test[1];
    const r = RANK_LINE.exec(line);
    if (r) {
      isRun = true;
      res.ranks.push({ rank: Number(r[1]), host: r[2], device: Number(r[3]), gpuName: r[4] || undefined });
      continue;
    }
    const words = line.split(/\s+/);
    const size = words.indexOf('size');
    if (size >= 0 && words[size + 1] === 'count' && words.includes('busbw')) {
      finishRow(true);
      columns = words.slice(size).map((c) => (c === 'wrong' ? '#wrong' : c));
      continue;
    }
    const avg = /Avg bus bandwidth\s*:\s*([\d.]+(?:e[+-]?\d+)?)/i.exec(line);
    if (avg) {
      finishRow(true);
      res.avgBusBwGBs = Number(avg[1]);
      res.complete = true;
      continue;
    }
    const oob = /Out of bounds values\s*:\s*(\d+)/.exec(line);
    if (oob) {
      finishRow(true);
      res.outOfBounds = Number(oob[1]);
      continue;
    }
    if (line.startsWith('#')) {
      finishRow(true);
      continue;
    }
    // A row is a size/count/type run wherever it starts in the line: prefixes before it are skipped.
    let start = rowStart(words);
    if (start >= 0) {
      // Its cells end at the first word that is not one (an NCCL INFO line flushed into the row),
      // or where the next row starts (a line break lost between two rows).
      while (start >= 0) {
        finishRow(true);
        const next = rowStart(words, start + 3);
        const cells = words.slice(start, next < 0 ? words.length : next);
        const end = cells.findIndex((c, k) => k !== 2 && !isCell(c));
        pending = { line: i + 1, raw: lines[i], cells: end < 0 ? cells : cells.slice(0, end) };
        finishRow(false);
        start = next;
      }
    } else if (words.every(isValue)) {
      if (pending) {
        pending.cells.push(...words);
        finishRow(false);
      } else if (words.length >= 2) {
        res.problems.push(
          problem(
            i + 1,
            'numbers without the size, count and type of a row: a row cut off or split',
            lines[i],
          ),
        );
      }
    }
    // Anything else (NCCL INFO/WARN, launcher chatter) is not this parser's: a pending row waits on.
  }
  finishRow(true);
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
  // A run of which no row could be read is one problem with its reason, not one per line.
  if (res.rows.length === 0 && (isRun || res.problems.length > 0)) {
    const first = res.problems[0];
    const more = res.problems.length > 1 ? ` (and ${res.problems.length - 1} more)` : '';
    res.problems = [
      problem(
        first?.line ?? 0,
        `no result row of this nccl-tests run could be read: ${first ? first.reason + more : 'no size/count/type rows in it'}`,
        first?.raw ?? '',
      ),
    ];
  }
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
