/**
 * dcgm-exporter's own event counts (DCGM_EXP_CLOCK_EVENTS_COUNT, DCGM_EXP_XID_ERRORS_COUNT and
 * the names they were exported under before: any DCGM* sample labelled `clock_event`,
 * `throttle_reason` or `xid`) → reason bits and XID faults.
 *
 * The exporter computes a windowed count (a sample labelled `window_size_in_ms`) from DCGM's
 * stored values of the last window (internal/pkg/collector/expcollector.go): a clock-event count
 * is how many samples of the clock-event bitmask had that reason set, an XID count how many times
 * that XID was recorded. So:
 * - a windowed clock-event count above zero says the reason was on at some moment of the window
 *   that ends at this scrape: its bit goes on this scrape's gpu event; zero (or the exporter's
 *   no-event row) says it was off all window long. Only thermal and power reasons are mapped:
 *   "was idle some time in the last 5 minutes" is no reason to call this sample idle.
 * - a windowed XID count is news by its rise: the same count on the next scrape is the same
 *   XIDs, a count that grows is new ones, one that falls is old ones leaving the window. A count
 *   seen for the first time is reported whole: it is at most one window old.
 * - a count without a window (a counter over the exporter's life) is read by its rise as well,
 *   but a GPU's first scrape is the baseline (its counts may be days old).
 */
import { type ParseProblem, problem } from './problems.js';
import type { Sample } from './prometheus.js';

/** Carried between scrapes: last count per series ("host/gpu|METRIC|xid=79"), last XID per GPU. */
export type DcgmState = Map<string, number>;

/** Clock-event names as dcgm-exporter labels them (clock_events_collector.go) → NVML reason bit. */
export const CLOCK_EVENT_BITS: Record<string, number> = {
  gpu_idle: 0x1,
  clocks_setting: 0x2,
  power_cap: 0x4,
  sw_power_cap: 0x4,
  hw_slowdown: 0x8,
  sync_boost: 0x10,
  sw_thermal: 0x20,
  hw_thermal: 0x40,
  hw_power_brake: 0x80,
  display_clocks: 0x100,
};

/** Reasons a count may set on a sample: thermal and power events (states such as idle are not). */
export const COUNTED_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80;

const XID_COUNTS = new Set(['DCGM_EXP_XID_ERRORS_COUNT', 'DCGM_EXP_XID_ERRORS_TOTAL']);
const EVENT_COUNTS = new Set([
  'DCGM_EXP_CLOCK_EVENTS_COUNT',
  'DCGM_EXP_CLOCK_EVENTS_TOTAL',
  'DCGM_FI_EXP_CLOCK_THROTTLE_REASONS_COUNT',
]);

/** The reason label: `clock_event`, or `throttle_reason` as dcgm-exporter PR #254 first named it. */
const reasonLabel = (s: Sample) => s.labels.clock_event ?? s.labels.throttle_reason;

/** What kind of count a sample is, if it is one. */
export function countKind(s: Sample): 'xid' | 'clock' | undefined {
  const dcgm = s.name.startsWith('DCGM');
  if (XID_COUNTS.has(s.name) || (dcgm && s.labels.xid !== undefined)) return 'xid';
  if (EVENT_COUNTS.has(s.name) || (dcgm && reasonLabel(s) !== undefined)) return 'clock';
  return undefined;
}

export interface XidNews {
  from: number;
  to: number;
  metric: string;
  /** The count's window, when it has one. */
  windowMs?: number;
  /** First sight of a windowed count: all of it is reported. */
  firstSeen: boolean;
}

/** What one GPU's counts said in one scrape. */
export interface GpuCounts {
  /** New XIDs in this scrape: code → news. */
  xids: Map<number, XidNews>;
  /** Thermal/power bits DCGM counted (windowed > 0, or a lifetime counter that rose). */
  bits: number;
  /** The GPU exports clock-event counts: its reasons are known even when no bit is set. */
  clockCounts: boolean;
  /** Window of the clock-event counts (ms), when windowed. */
  windowMs?: number;
  /** The GPU exports XID counts: its last-XID field is then redundant. */
  xidCounts: boolean;
}

export const emptyCounts = (): GpuCounts => ({
  xids: new Map(),
  bits: 0,
  clockCounts: false,
  xidCounts: false,
});

export interface CountSample {
  /** "host/gpu" */
  gpu: string;
  out: GpuCounts;
  s: Sample;
  kind: 'xid' | 'clock';
}

const windowOf = (s: Sample) => {
  const w = Number(s.labels.window_size_in_ms);
  return Number.isFinite(w) && w > 0 ? w : undefined;
};

const seriesKey = ({ gpu, s, kind }: CountSample) =>
  `${gpu}|${s.name}|${kind === 'xid' ? `xid=${s.labels.xid}` : `clock_event=${reasonLabel(s)}`}`;

/** Reads one scrape's counts into each GPU's `out`, comparing with the last scrape's in `state`. */
export function readCounts(counts: CountSample[], state: DcgmState, problems: ParseProblem[]): void {
  const fresh = new Set<string>();
  for (const { gpu } of counts) if (!state.has(`${gpu}|counts`)) fresh.add(gpu);
  for (const c of counts) {
    const { out, s, kind } = c;
    const windowMs = windowOf(s);
    const value = s.value as number;
    if (kind === 'xid') out.xidCounts = true;
    else {
      out.clockCounts = true;
      if (windowMs !== undefined) out.windowMs = Math.max(out.windowMs ?? 0, windowMs);
    }
    const label = kind === 'xid' ? s.labels.xid : reasonLabel(s);
    if (label === undefined) continue; // the exporter's "no events" row: value 0, no label
    if (kind === 'clock') {
      const bit = CLOCK_EVENT_BITS[label];
      if (bit === undefined) {
        problems.push(problem(0, `${s.name}: unknown clock_event "${label}"`, JSON.stringify(s.labels)));
        continue;
      }
      if (windowMs !== undefined) {
        if (value > 0) out.bits |= bit & COUNTED_BITS;
        continue;
      }
    }
    const series = seriesKey(c);
    const seen = state.get(series);
    const before = seen ?? (windowMs === undefined && fresh.has(c.gpu) ? value : 0);
    state.set(series, value);
    if (!(value > before)) continue;
    if (kind === 'clock') {
      out.bits |= CLOCK_EVENT_BITS[label] & COUNTED_BITS;
      continue;
    }
    const code = Number(label);
    if (!Number.isInteger(code) || code <= 0) {
      problems.push(
        problem(0, `${s.name}: xid label "${label}" is not an XID number`, JSON.stringify(s.labels)),
      );
      continue;
    }
    out.xids.set(code, { from: before, to: value, metric: s.name, windowMs, firstSeen: seen === undefined });
  }
  // A series the exporter no longer prints has fallen to zero (its events left the window, or the
  // exporter restarted): the next event of that kind is a rise from zero, not hidden by the old value.
  const printed = new Set(counts.map(seriesKey));
  const gpus = new Set(counts.map(({ gpu }) => `${gpu}|`));
  for (const key of state.keys()) {
    const cut = key.indexOf('|');
    if (cut > 0 && gpus.has(key.slice(0, cut + 1)) && key.includes('=') && !printed.has(key))
      state.set(key, 0);
  }
  for (const { gpu } of counts) state.set(`${gpu}|counts`, 1);
}
