/**
 * nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf,
 * broadcast_perf, sendrecv_perf, …) → link-probe results for the set of hosts the test ran on.
 * Columns are read from the table header, so older layouts (no redop/root, "error" instead of
 * "#wrong") parse the same way. Each size becomes `collective` events with `probe: true`.
 */
import type { CollectiveEvent as C } from '../../schema/events.js';
import { type Open, type ParseProblem, problem, splitLines } from './problems.js';

type CollectiveEvent = Open<C>;

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
  /** Wrong elements (undefined when validation was off: "N/A"). */
  wrong?: number;
}

export interface NcclTestResult {
  /** Binary name when the output says it ("all_reduce_perf"), else undefined. */
  test?: string;
  ranks: { rank: number; host: string; device: number; gpuName?: string }[];
  hosts: string[];
  rows: NcclTestRow[];
  avgBusBwGBs?: number;
  outOfBounds?: number;
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
  /^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$/;

export function parseNcclTests(text: string): NcclTestResult {
  const res: NcclTestResult = { ranks: [], hosts: [], rows: [], problems: [] };
  let columns: string[] | undefined;
  const lines = splitLines(text);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line === '') continue;
    if (line.startsWith('#')) {
      const test = /Collective test starting:\s*(\S+)/.exec(line) ?? /^#\s*(\w+_perf)\b/.exec(line);
      if (test) res.test = test[1];
      const r = RANK_LINE.exec(line);
      if (r)
        res.ranks.push({ rank: Number(r[1]), host: r[2], device: Number(r[3]), gpuName: r[4] || undefined });
      const cols = line.slice(1).trim().split(/\s+/);
      if (cols[0] === 'size' && cols.includes('busbw'))
        columns = cols.map((c) => (c === 'error' ? '#wrong' : c));
      const avg = /Avg bus bandwidth\s*:\s*([\d.]+)/.exec(line);
      if (avg) res.avgBusBwGBs = Number(avg[1]);
      const oob = /Out of bounds values\s*:\s*(\d+)/.exec(line);
      if (oob) res.outOfBounds = Number(oob[1]);
      continue;
    }
    const rows = parseRow(line.split(/\s+/), columns ?? DEFAULT_COLUMNS);
    if (typeof rows === 'string') res.problems.push(problem(i + 1, rows, line));
    else res.rows.push(...rows);
  }
  res.hosts = [...new Set(res.ranks.map((r) => r.host))].sort();
  return res;
}

function parseRow(cells: string[], columns: string[]): NcclTestRow[] | string {
  if (cells.length !== columns.length) return `expected ${columns.length} columns, got ${cells.length}`;
  const at = (name: string, nth = 0) => {
    let seen = 0;
    for (let i = 0; i < columns.length; i++) if (columns[i] === name && seen++ === nth) return cells[i];
    return undefined;
  };
  const num = (v: string | undefined) => (v === undefined ? Number.NaN : Number(v));
  const bytes = num(at('size'));
  const count = num(at('count'));
  if (!Number.isInteger(bytes) || !Number.isInteger(count)) return 'size or count is not an integer';
  const out: NcclTestRow[] = [];
  for (const [nth, inPlace] of [
    [0, false],
    [1, true],
  ] as const) {
    const timeUs = num(at('time', nth));
    const algbw = num(at('algbw', nth));
    const busbw = num(at('busbw', nth));
    if (at('time', nth) === undefined) continue;
    if (![timeUs, algbw, busbw].every(Number.isFinite)) return 'time/algbw/busbw is not a number';
    const wrongText = at('#wrong', nth);
    const wrong = wrongText === undefined || wrongText === 'N/A' ? undefined : Number(wrongText);
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
      ...(wrong !== undefined && Number.isFinite(wrong) ? { wrong } : {}),
    });
  }
  return out;
}

const OPS: Record<string, C['op']> = {
  all_reduce: 'allreduce',
  all_gather: 'allgather',
  reduce_scatter: 'reducescatter',
  alltoall: 'alltoall',
  broadcast: 'broadcast',
  sendrecv: 'send',
  reduce: 'allreduce',
};

/** Probe results as v1 `collective` events (one per size and placement), marked `probe: true`. */
export function ncclTestEvents(
  r: NcclTestResult,
  ctx: { ts: number; job?: string; test?: string; host?: string },
): CollectiveEvent[] {
  const test = ctx.test ?? r.test ?? 'all_reduce_perf';
  const base = test.replace(/_perf$/, '');
  const op = OPS[base] ?? 'allreduce';
  const host = r.hosts[0] ?? ctx.host ?? 'unknown';
  const comm = `probe:${base}:${r.hosts.join(',') || host}`;
  const job = ctx.job ?? `probe:${r.hosts.join(',') || host}`;
  return r.rows.map((row, i) => ({
    v: 1,
    kind: 'collective',
    ts: ctx.ts,
    job,
    rank: 0,
    host,
    step: i,
    op,
    comm,
    nranks: Math.max(1, r.ranks.length),
    bytes: row.bytes,
    dur_ms: row.timeUs / 1000,
    probe: true,
    test,
    hosts: r.hosts,
    in_place: row.inPlace,
    dtype: row.dtype,
    algbw_gbps: row.algbwGBs,
    busbw_gbps: row.busbwGBs,
    ...(row.wrong !== undefined ? { wrong: row.wrong } : {}),
    ...(r.avgBusBwGBs !== undefined ? { avg_busbw_gbps: r.avgBusBwGBs } : {}),
  }));
}
