/**
 * dcgm-exporter samples → v1 `gpu` events (one per GPU per scrape) and `fault` events for XIDs.
 *
 * Field names differ across DCGM releases and deployments, so this accepts: both clock-reason
 * fields (CLOCK_THROTTLE_REASONS, renamed CLOCKS_EVENT_REASONS), `Hostname` or `hostname`, any
 * label with "uuid" in its name, and Kubernetes pod/namespace/container labels (→ `job`).
 * DCGM reports "not available" as blank sentinels, never as a real reading: they are dropped.
 * DCGM_FI_DEV_XID_ERRORS is the LAST XID seen, not a count: a change to a new non-zero value is
 * a new fault. The first scrape only sets the baseline (an old XID is not re-reported on restart).
 * The exporter's event counts (DCGM_EXP_XID_ERRORS_COUNT/_TOTAL, DCGM_EXP_CLOCK_EVENTS_COUNT/_TOTAL,
 * any sample labelled `xid` or `clock_event`) are read by their rise: a count above the last scrape's
 * is new events (one fault, or the reason bit set on this scrape's gpu event); a steady or falling
 * count (the windowed gauge sliding, an exporter restart) is nothing new.
 */
import type { FaultEvent as F, GpuEvent as G } from '../../schema/events.js';
import { type Open, type ParseProblem, problem } from './problems.js';
import { parsePrometheusText, type Sample } from './prometheus.js';

export interface DcgmMapping {
  /** Host for samples without a Hostname label. */
  host: string;
  /** Fixed job for every GPU on this node (overrides Kubernetes labels). */
  job?: string;
  /** Job from the pod name: the first capture group of this regex (default strips -worker-N / -N). */
  podJobPattern?: string;
}

/** Carried between scrapes: last XID per GPU ("host/gpu"), last event count per series ("host/gpu|xid=79"). */
export type DcgmState = Map<string, number>;

/** 2^63−100: DCGM's int64 blank range starts above it (NOT_FOUND, NOT_SUPPORTED, ...). */
type GpuEvent = Open<G>;
type FaultEvent = Open<F>;

const INT64_BLANK = 2 ** 63 - 100;
/** DCGM_INT32_BLANK (0x7ffffff0) up to 0x7fffffff. */
const INT32_BLANK = 0x7ffffff0;
/** DCGM_FP64_BLANK (2^47) and the three special values after it. */
const FP64_BLANK = 2 ** 47;

export function isBlank(v: number | undefined): boolean {
  if (v === undefined || !Number.isFinite(v)) return true;
  if (v >= INT64_BLANK) return true;
  if (v >= INT32_BLANK && v <= 0x7fffffff) return true;
  return v >= FP64_BLANK && v <= FP64_BLANK + 4;
}

/** Field → event property. Values are converted where DCGM's unit differs from the contract's. */
const FIELDS: Record<string, { key: string; scale?: number; int?: boolean }> = {
  DCGM_FI_DEV_SM_CLOCK: { key: 'sm_clock_mhz' },
  DCGM_FI_DEV_MAX_SM_CLOCK: { key: 'max_sm_clock_mhz' },
  DCGM_FI_DEV_MEM_CLOCK: { key: 'mem_clock_mhz' },
  DCGM_FI_DEV_GPU_TEMP: { key: 'temp_c' },
  DCGM_FI_DEV_MEMORY_TEMP: { key: 'mem_temp_c' },
  DCGM_FI_DEV_POWER_USAGE: { key: 'power_w' },
  DCGM_FI_DEV_GPU_UTIL: { key: 'util_pct' },
  DCGM_FI_DEV_MEM_COPY_UTIL: { key: 'mem_copy_util_pct' },
  // Profiling fields are ratios 0..1; kept as percent like util_pct.
  DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: { key: 'tensor_active_pct', scale: 100 },
  DCGM_FI_PROF_GR_ENGINE_ACTIVE: { key: 'gr_engine_active_pct', scale: 100 },
  DCGM_FI_PROF_SM_ACTIVE: { key: 'sm_active_pct', scale: 100 },
  DCGM_FI_DEV_CLOCK_THROTTLE_REASONS: { key: 'throttle_reasons', int: true },
  DCGM_FI_DEV_CLOCKS_EVENT_REASONS: { key: 'throttle_reasons', int: true },
  DCGM_FI_DEV_ECC_SBE_VOL_TOTAL: { key: 'ecc_sbe', int: true },
  DCGM_FI_DEV_ECC_DBE_VOL_TOTAL: { key: 'ecc_dbe', int: true },
  DCGM_FI_DEV_ECC_SBE_AGG_TOTAL: { key: 'ecc_sbe_agg', int: true },
  DCGM_FI_DEV_ECC_DBE_AGG_TOTAL: { key: 'ecc_dbe_agg', int: true },
  DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS: { key: 'remapped_rows_correctable', int: true },
  DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS: { key: 'remapped_rows_uncorrectable', int: true },
  DCGM_FI_DEV_ROW_REMAP_FAILURE: { key: 'row_remap_failure', int: true },
  DCGM_FI_DEV_XID_ERRORS: { key: 'last_xid', int: true },
};

const DEFAULT_POD_JOB = /^(.+?)(?:-(?:worker|master|launcher|trainer))?-\d+$/;

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

export interface DcgmResult {
  events: (GpuEvent | FaultEvent)[];
  problems: ParseProblem[];
  /** DCGM_* metrics this parser does not use, with their sample counts: not errors, counted apart. */
  ignored: Record<string, number>;
}

export function dcgmToEvents(text: string, ts: number, map: DcgmMapping, state: DcgmState): DcgmResult {
  // The text format ends every line with \n: a body without it was cut mid-line (a dropped
  // connection, a proxy limit), and its last value may be cut mid-number ("1980" read as "1").
  if (text.length > 0 && !text.endsWith('\n')) {
    const last = text.slice(text.lastIndexOf('\n') + 1);
    return {
      events: [],
      problems: [problem(0, 'scrape body cut short (no newline at its end): whole scrape refused', last)],
      ignored: {},
    };
  }
  const parsed = parsePrometheusText(text);
  const out = samplesToEvents(parsed.samples, ts, map, state);
  return { events: out.events, problems: [...parsed.problems, ...out.problems], ignored: out.ignored };
}

interface Gpu {
  host: string;
  gpu: number;
  labels: Record<string, string>;
  fields: Record<string, number>;
  /** Rises of the exporter's XID counts in this scrape: xid → new events. */
  xidRises: Map<number, { from: number; to: number; metric: string }>;
  /** Reason bits whose clock-event count rose in this scrape. */
  eventBits: number;
  /** The GPU carries an XID count metric: its last-XID field is then redundant. */
  hasXidCounts: boolean;
}

/** The exporter's count metrics, by name; any sample labelled xid / clock_event counts as well. */
const XID_COUNTS = new Set(['DCGM_EXP_XID_ERRORS_COUNT', 'DCGM_EXP_XID_ERRORS_TOTAL']);
const EVENT_COUNTS = new Set([
  'DCGM_EXP_CLOCK_EVENTS_COUNT',
  'DCGM_EXP_CLOCK_EVENTS_TOTAL',
  'DCGM_FI_EXP_CLOCK_THROTTLE_REASONS_COUNT',
]);

export function samplesToEvents(
  samples: Sample[],
  ts: number,
  map: DcgmMapping,
  state: DcgmState,
): DcgmResult {
  const gpus = new Map<string, Gpu>();
  const problems: ParseProblem[] = [];
  const ignored: Record<string, number> = {};
  const counts: { g: Gpu; s: Sample; xid: boolean }[] = [];
  for (const s of samples) {
    const field = FIELDS[s.name];
    const xidCount = XID_COUNTS.has(s.name) || (s.labels.xid !== undefined && s.name.startsWith('DCGM'));
    const eventCount =
      EVENT_COUNTS.has(s.name) || (s.labels.clock_event !== undefined && s.name.startsWith('DCGM'));
    if (!field && !xidCount && !eventCount) {
      if (/^dcgm_/i.test(s.name)) ignored[s.name] = (ignored[s.name] ?? 0) + 1;
      continue;
    }
    const index = Number(s.labels.gpu ?? s.labels.GPU ?? s.labels.device?.replace(/^nvidia/, ''));
    if (!Number.isInteger(index) || index < 0) {
      problems.push(problem(0, `${s.name} sample has no gpu index label`, JSON.stringify(s.labels)));
      continue;
    }
    const host = s.labels.Hostname || s.labels.hostname || map.host;
    const key = `${host}/${index}`;
    let g = gpus.get(key);
    if (!g) {
      g = {
        host,
        gpu: index,
        labels: s.labels,
        fields: {},
        xidRises: new Map(),
        eventBits: 0,
        hasXidCounts: false,
      };
      gpus.set(key, g);
    }
    if (!field) {
      if (xidCount) g.hasXidCounts = true;
      if (!isBlank(s.value)) counts.push({ g, s, xid: xidCount });
      continue;
    }
    if (isBlank(s.value)) continue;
    let v = (s.value as number) * (field.scale ?? 1);
    if (field.int) v = Math.round(v);
    g.fields[field.key] = v;
  }

  readCounts(counts, state, problems);

  const events: (GpuEvent | FaultEvent)[] = [];
  for (const [key, g] of gpus) {
    const ids = identity(g.labels, map);
    for (const [code, r] of g.xidRises) {
      const n = r.to - r.from;
      events.push({
        v: 1,
        kind: 'fault',
        ts,
        host: g.host,
        gpu: g.gpu,
        ...ids,
        source: 'xid',
        code,
        count: n,
        message: `XID ${code} reported by dcgm-exporter (${r.metric} rose from ${r.from} to ${r.to}: ${n} new)`,
      });
    }
    const xid = g.fields.last_xid;
    if (xid !== undefined) {
      const before = state.get(key);
      state.set(key, xid);
      // With the exporter's XID counts present they report every XID, repeats included.
      if (!g.hasXidCounts && before !== undefined && xid !== before && xid !== 0) {
        events.push({
          v: 1,
          kind: 'fault',
          ts,
          host: g.host,
          gpu: g.gpu,
          ...ids,
          source: 'xid',
          code: xid,
          message: `XID ${xid} reported by dcgm-exporter (last XID changed from ${before})`,
        });
      }
    }
    const f = { ...g.fields };
    delete f.last_xid;
    if (f.sm_clock_mhz === undefined) {
      problems.push(problem(0, `GPU ${key}: no SM clock in this scrape, no gpu event`, ''));
      continue;
    }
    // A rise says the reason happened since the last scrape; a steady count says nothing about
    // now (the windowed count plateaus while a reason stays on), so it leaves the bits unknown.
    if (g.eventBits) f.throttle_reasons = (f.throttle_reasons ?? 0) | g.eventBits;
    const known = f.throttle_reasons !== undefined;
    events.push({
      v: 1,
      kind: 'gpu',
      ts,
      host: g.host,
      gpu: g.gpu,
      ...ids,
      ...f,
      sm_clock_mhz: f.sm_clock_mhz,
      throttle_reasons: f.throttle_reasons ?? 0,
      // The exporter's default counters omit clock-event reasons: say so rather than imply "none".
      ...(known ? {} : { throttle_reasons_unknown: true }),
    } as GpuEvent);
  }
  return { events, problems, ignored };
}

/** One count series: GPU, metric (an exporter may print the windowed and the total count), label. */
const seriesKey = (g: Gpu, s: Sample, xid: boolean) =>
  `${g.host}/${g.gpu}|${s.name}|${xid ? `xid=${s.labels.xid}` : `clock_event=${s.labels.clock_event}`}`;

/**
 * Compares each count with the last scrape's. A GPU's first scrape is the baseline (counts from
 * before the collector started are old news); a series first seen later starts from zero, since
 * the exporter prints one only once its event has happened.
 */
function readCounts(
  counts: { g: Gpu; s: Sample; xid: boolean }[],
  state: DcgmState,
  problems: ParseProblem[],
) {
  const fresh = new Set<Gpu>();
  for (const { g } of counts) if (!state.has(`${g.host}/${g.gpu}|counts`)) fresh.add(g);
  for (const { g, s, xid } of counts) {
    const label = xid ? s.labels.xid : s.labels.clock_event;
    if (label === undefined) continue; // the exporter's "no events" row: value 0, no label
    const series = seriesKey(g, s, xid);
    const value = s.value as number;
    const before = state.get(series) ?? (fresh.has(g) ? value : 0);
    state.set(series, value);
    if (!(value > before)) continue;
    if (xid) {
      const code = Number(label);
      if (!Number.isInteger(code) || code <= 0) {
        problems.push(
          problem(0, `${s.name}: xid label "${label}" is not an XID number`, JSON.stringify(s.labels)),
        );
        continue;
      }
      g.xidRises.set(code, { from: before, to: value, metric: s.name });
    } else {
      const bit = CLOCK_EVENT_BITS[label];
      if (bit === undefined) {
        problems.push(problem(0, `${s.name}: unknown clock_event "${label}"`, JSON.stringify(s.labels)));
        continue;
      }
      g.eventBits |= bit;
    }
  }
  // A series the exporter no longer prints has fallen to zero (its events left the window, or the
  // exporter restarted): the next event of that kind is a rise from zero, not hidden by the old value.
  const seen = new Set(counts.map(({ g, s, xid }) => seriesKey(g, s, xid)));
  const gpus = new Set(counts.map(({ g }) => `${g.host}/${g.gpu}|`));
  for (const key of state.keys()) {
    const cut = key.indexOf('|');
    if (cut > 0 && gpus.has(key.slice(0, cut + 1)) && key.includes('=') && !seen.has(key)) state.set(key, 0);
  }
  for (const { g } of counts) state.set(`${g.host}/${g.gpu}|counts`, 1);
}

function identity(labels: Record<string, string>, map: DcgmMapping): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(labels)) {
    if (/uuid/i.test(k) && v) out.uuid = v;
  }
  if (labels.modelName) out.gpu_name = labels.modelName;
  for (const k of ['pod', 'namespace', 'container'] as const) if (labels[k]) out[k] = labels[k];
  if (map.job) out.job = map.job;
  else if (labels.pod) {
    const re = map.podJobPattern ? new RegExp(map.podJobPattern) : DEFAULT_POD_JOB;
    const m = re.exec(labels.pod);
    out.job = m?.[1] ?? labels.pod;
  }
  return out;
}
