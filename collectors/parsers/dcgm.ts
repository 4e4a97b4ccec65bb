/**
 * dcgm-exporter samples → v1 `gpu` events (one per GPU per scrape) and `fault` events for XIDs.
 *
 * Field names differ across DCGM releases and deployments, so this accepts: both clock-reason
 * fields (CLOCK_THROTTLE_REASONS, renamed CLOCKS_EVENT_REASONS), `Hostname` or `hostname`, any
 * label with "uuid" in its name, and Kubernetes pod/namespace/container labels (→ `job`).
 * DCGM reports "not available" as blank sentinels, never as a real reading: they are dropped.
 * DCGM_FI_DEV_XID_ERRORS is the LAST XID seen, not a count: a change to a new non-zero value is
 * a new fault. The first scrape only sets the baseline (an old XID is not re-reported on restart).
 * The exporter's own event counts (DCGM_EXP_CLOCK_EVENTS_COUNT, DCGM_EXP_XID_ERRORS_COUNT and the
 * names they carried before) are read in dcgm_counts.ts: a clock event counted in the window sets
 * its reason bit, an XID count that grows is new faults, with or without an SM clock.
 */
import type { FaultEvent as F, GpuEvent as G } from '../../schema/events.js';
import {
  type CountSample,
  countKind,
  type DcgmState,
  emptyCounts,
  type GpuCounts,
  readCounts,
} from './dcgm_counts.js';
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

export { CLOCK_EVENT_BITS, type DcgmState } from './dcgm_counts.js';

type GpuEvent = Open<G>;
type FaultEvent = Open<F>;

/** 2^63−100: DCGM's int64 blank range starts above it (NOT_FOUND, NOT_SUPPORTED, ...). */
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
  counts: GpuCounts;
}

export function samplesToEvents(
  samples: Sample[],
  ts: number,
  map: DcgmMapping,
  state: DcgmState,
): DcgmResult {
  const gpus = new Map<string, Gpu>();
  const problems: ParseProblem[] = [];
  const ignored: Record<string, number> = {};
  const counts: CountSample[] = [];
  for (const s of samples) {
    const field = FIELDS[s.name];
    const kind = field ? undefined : countKind(s);
    if (!field && !kind) {
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
      g = { host, gpu: index, labels: s.labels, fields: {}, counts: emptyCounts() };
      gpus.set(key, g);
    }
    if (isBlank(s.value)) continue;
    if (kind) {
      counts.push({ gpu: key, out: g.counts, s, kind });
      continue;
    }
    let v = (s.value as number) * (field.scale ?? 1);
    if (field.int) v = Math.round(v);
    g.fields[field.key] = v;
  }

  readCounts(counts, state, problems);

  const events: (GpuEvent | FaultEvent)[] = [];
  for (const [key, g] of gpus) {
    const ids = identity(g.labels, map);
    for (const [code, x] of g.counts.xids) {
      const n = x.to - x.from;
      const window = x.windowMs !== undefined ? ` within the last ${x.windowMs / 1000} s` : '';
      const how = x.firstSeen
        ? `${x.metric} first seen at ${x.to}${window}`
        : `${x.metric} rose from ${x.from} to ${x.to}${window}: ${n} new`;
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
        ...(x.windowMs !== undefined ? { window_ms: x.windowMs } : {}),
        message: `XID ${code} reported by dcgm-exporter (${how})`,
      });
    }
    const xid = g.fields.last_xid;
    if (xid !== undefined) {
      const before = state.get(key);
      state.set(key, xid);
      // With the exporter's XID counts present they report every XID, repeats included.
      if (!g.counts.xidCounts && before !== undefined && xid !== before && xid !== 0) {
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
    const gpu = gpuEvent(g, f, ts, ids);
    if (gpu) events.push(gpu);
    // A GPU seen only through its XID metrics owes no gpu event; one with telemetry but no clock does.
    else if (Object.keys(f).length > 0 || g.counts.clockCounts)
      problems.push(problem(0, `GPU ${key}: no SM clock in this scrape, no gpu event`, ''));
  }
  return { events, problems, ignored };
}

/**
 * The scrape's gpu event, or undefined without an SM clock. The reason bitmask field is the state
 * at the scrape and wins; without it the thermal and power reasons DCGM counted are the reasons
 * (see dcgm_counts.ts), and only a GPU with neither says its reasons are unknown.
 */
function gpuEvent(g: Gpu, f: Record<string, number>, ts: number, ids: Record<string, string>) {
  if (f.sm_clock_mhz === undefined) return undefined;
  const c = g.counts;
  const fromCounts = f.throttle_reasons === undefined && c.clockCounts;
  const reasons = f.throttle_reasons ?? (c.clockCounts ? c.bits : undefined);
  return {
    v: 1,
    kind: 'gpu',
    ts,
    host: g.host,
    gpu: g.gpu,
    ...ids,
    ...f,
    sm_clock_mhz: f.sm_clock_mhz,
    throttle_reasons: reasons ?? 0,
    ...(c.clockCounts ? { clock_event_reasons: c.bits } : {}),
    ...(c.clockCounts && c.windowMs !== undefined ? { clock_event_window_ms: c.windowMs } : {}),
    ...(fromCounts ? { throttle_reasons_from: 'clock_event_counts' } : {}),
    // The exporter's default counters omit clock-event reasons: say so rather than imply "none".
    ...(reasons === undefined ? { throttle_reasons_unknown: true } : {}),
  } as GpuEvent;
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
