/**
 * dcgm-exporter samples → v1 `gpu` events (one per GPU per scrape) and `fault` events for XIDs.
 *
 * Field names differ across DCGM releases and deployments, so this accepts: both clock-reason
 * fields (CLOCK_THROTTLE_REASONS, renamed CLOCKS_EVENT_REASONS), `Hostname` or `hostname`, any
 * label with "uuid" in its name, and Kubernetes pod/namespace/container labels (→ `job`).
 * DCGM reports "not available" as blank sentinels, never as a real reading: they are dropped.
 * DCGM_FI_DEV_XID_ERRORS is the LAST XID seen, not a count: a change to a new non-zero value is
 * a new fault. The first scrape only sets the baseline (an old XID is not re-reported on restart).
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

/** Last XID per GPU, carried between scrapes. */
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

export interface DcgmResult {
  events: (GpuEvent | FaultEvent)[];
  problems: ParseProblem[];
}

export function dcgmToEvents(text: string, ts: number, map: DcgmMapping, state: DcgmState): DcgmResult {
  const parsed = parsePrometheusText(text);
  const out = samplesToEvents(parsed.samples, ts, map, state);
  return { events: out.events, problems: [...parsed.problems, ...out.problems] };
}

interface Gpu {
  host: string;
  gpu: number;
  labels: Record<string, string>;
  fields: Record<string, number>;
}

export function samplesToEvents(
  samples: Sample[],
  ts: number,
  map: DcgmMapping,
  state: DcgmState,
): DcgmResult {
  const gpus = new Map<string, Gpu>();
  const problems: ParseProblem[] = [];
  for (const s of samples) {
    const field = FIELDS[s.name];
    if (!field) continue;
    const index = Number(s.labels.gpu ?? s.labels.GPU ?? s.labels.device?.replace(/^nvidia/, ''));
    if (!Number.isInteger(index) || index < 0) {
      problems.push(problem(0, `${s.name} sample has no gpu index label`, JSON.stringify(s.labels)));
      continue;
    }
    const host = s.labels.Hostname || s.labels.hostname || map.host;
    const key = `${host}/${index}`;
    let g = gpus.get(key);
    if (!g) {
      g = { host, gpu: index, labels: s.labels, fields: {} };
      gpus.set(key, g);
    }
    if (isBlank(s.value)) continue;
    let v = (s.value as number) * (field.scale ?? 1);
    if (field.int) v = Math.round(v);
    g.fields[field.key] = v;
  }

  const events: (GpuEvent | FaultEvent)[] = [];
  for (const [key, g] of gpus) {
    const ids = identity(g.labels, map);
    const xid = g.fields.last_xid;
    if (xid !== undefined) {
      const before = state.get(key);
      state.set(key, xid);
      if (before !== undefined && xid !== before && xid !== 0) {
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
  return { events, problems };
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
