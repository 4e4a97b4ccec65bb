/**
 * `nvidia-smi --query-gpu=… --format=csv[,noheader][,nounits] -lms N` → v1 `gpu` events.
 * A stateful line parser: the header (with or without units, repeated or not) sets the columns;
 * with `noheader` the caller passes the query fields. Values may carry units ("1980 MHz"), be
 * "[N/A]" / "[Not Supported]" (dropped), or be hex bitmasks (clock-event reasons).
 */
import type { GpuEvent as G } from '../../schema/events.js';
import { type Open, type ParseProblem, problem, splitShipperStamp } from './problems.js';

type GpuEvent = Open<G>;

/** What the collector asks nvidia-smi for by default. */
export const DEFAULT_QUERY = [
  'timestamp',
  'index',
  'uuid',
  'name',
  'pci.bus_id',
  'clocks.sm',
  'clocks.max.sm',
  'power.draw',
  'temperature.gpu',
  'utilization.gpu',
  'clocks_event_reasons.active',
  'ecc.errors.corrected.volatile.total',
  'ecc.errors.uncorrected.volatile.total',
];

const NUMERIC: Record<string, string> = {
  'clocks.sm': 'sm_clock_mhz',
  'clocks.current.sm': 'sm_clock_mhz',
  'clocks.max.sm': 'max_sm_clock_mhz',
  'clocks.max.sm_clock': 'max_sm_clock_mhz',
  'clocks.mem': 'mem_clock_mhz',
  'clocks.current.memory': 'mem_clock_mhz',
  'power.draw': 'power_w',
  'power.draw.instant': 'power_w',
  'power.limit': 'power_limit_w',
  'temperature.gpu': 'temp_c',
  'temperature.memory': 'mem_temp_c',
  'utilization.gpu': 'util_pct',
  'utilization.memory': 'mem_util_pct',
  'ecc.errors.corrected.volatile.total': 'ecc_sbe',
  'ecc.errors.uncorrected.volatile.total': 'ecc_dbe',
};
const REASONS = new Set(['clocks_event_reasons.active', 'clocks_throttle_reasons.active']);
const INTEGER = new Set(['throttle_reasons', 'ecc_sbe', 'ecc_dbe']);

export interface NvidiaSmiLine {
  event?: GpuEvent;
  /** index → PCI bus id as the kernel prints it (0000:3b:00), for the kernel-log source. */
  pci?: { gpu: number; busId: string };
  problem?: ParseProblem;
}

/** "00000000:3B:00.0" (nvidia-smi) or "PCI:0000:3b:00" (kernel) → "0000:3b:00". */
export function normalizePciBusId(id: string): string {
  const m = /(?:PCI:)?([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})/.exec(id);
  if (!m) return id.toLowerCase();
  return `${m[1].slice(-4).padStart(4, '0')}:${m[2]}:${m[3]}`.toLowerCase();
}

const isUnavailable = (v: string) =>
  v === '' ||
  /^\[?(N\/A|Not Supported|Unknown Error|Insufficient Permissions|GPU is lost|Requested functionality has been deprecated)\]?$/i.test(
    v,
  );

export class NvidiaSmiParser {
  private columns: string[] | undefined;
  private lineNo = 0;

  constructor(
    private readonly host: string,
    query?: string[],
  ) {
    this.columns = query?.map((q) => q.trim());
  }

  /** `now` is used when the line has no parseable timestamp column. */
  push(raw: string, now: number): NvidiaSmiLine {
    this.lineNo++;
    // A shipper's stamp in front (kubectl logs --timestamps) is not a column; its time stands in
    // for a missing timestamp column.
    const shipped = splitShipperStamp(raw.trim());
    const line = shipped.rest.trim();
    if (line === '') return {};
    const cells = line.split(',').map((c) => c.trim());
    if (isHeader(cells)) {
      this.columns = cells.map((c) => c.replace(/\s*\[[^\]]*\]$/, '').trim());
      return {};
    }
    if (!this.columns)
      return { problem: problem(this.lineNo, 'data before any header and no query fields given', line) };
    if (cells.length !== this.columns.length)
      return {
        problem: problem(this.lineNo, `expected ${this.columns.length} columns, got ${cells.length}`, line),
      };
    const out: Record<string, unknown> = { v: 1, kind: 'gpu', ts: shipped.ts ?? now, host: this.host };
    let pciBus: string | undefined;
    for (let i = 0; i < cells.length; i++) {
      const col: string = this.columns[i];
      const v = cells[i];
      if (isUnavailable(v)) continue;
      if (col === 'timestamp') {
        const t = parseSmiTimestamp(v);
        if (t !== undefined) out.ts = t;
      } else if (col === 'index') {
        out.gpu = Number(v);
      } else if (col === 'uuid') out.uuid = v;
      else if (col === 'name') out.gpu_name = v;
      else if (col === 'pci.bus_id') pciBus = normalizePciBusId(v);
      else if (REASONS.has(col)) {
        const n = Number.parseInt(v, v.startsWith('0x') || v.startsWith('0X') ? 16 : 10);
        if (Number.isNaN(n))
          return { problem: problem(this.lineNo, `${col}: "${v}" is not a bitmask`, line) };
        out.throttle_reasons = n;
      } else if (NUMERIC[col]) {
        const n = Number(v.replace(/\s*(MHz|W|%|C|MiB)$/, ''));
        if (Number.isNaN(n)) return { problem: problem(this.lineNo, `${col}: "${v}" is not a number`, line) };
        const key = NUMERIC[col];
        out[key] = INTEGER.has(key) ? Math.round(n) : n;
      }
    }
    if (!Number.isInteger(out.gpu))
      return { problem: problem(this.lineNo, 'no GPU index in the line', line) };
    if (pciBus) out.pci_bus_id = pciBus;
    const pci = pciBus ? { gpu: out.gpu as number, busId: pciBus } : undefined;
    if (out.sm_clock_mhz === undefined)
      return { pci, problem: problem(this.lineNo, 'no SM clock reading', line) };
    if (out.throttle_reasons === undefined) {
      out.throttle_reasons = 0;
      out.throttle_reasons_unknown = true;
    }
    return { event: out as GpuEvent, pci };
  }
}

function isHeader(cells: string[]): boolean {
  return cells.some((c) => c === 'index' || c.startsWith('clocks.') || c === 'uuid' || c === 'timestamp');
}

/** "2026/11/30 05:12:01.123", local time as nvidia-smi prints it. */
function parseSmiTimestamp(v: string): number | undefined {
  const m = /^(\d{4})\/(\d{2})\/(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?$/.exec(v);
  if (!m) return undefined;
  const [, y, mo, d, h, mi, s, ms] = m;
  return new Date(+y, +mo - 1, +d, +h, +mi, +s, Number((ms ?? '0').padEnd(3, '0'))).getTime();
}
