/**
 * XID and ECC faults → findings, judged by the triage table (triage.ts) and by what the fault
 * says about itself:
 * - a storm: identical (GPU, code) lines within `sameOccurrenceMs` of each other are one
 *   occurrence, counted (a node can print hundreds of thousands of identical Xid lines); events
 *   a collector already counted (dcgm-exporter's rises, `count`) join within `countedOccurrenceMs`;
 * - Xid 154's recovery action overrides the static table for its GPU until a 154 back to None
 *   clears it (and resolves its finding);
 * - NVLink5 Xids 144–150 wait up to `nvlinkWaitMs` for the 154 that tells what the GPU needs;
 *   without one, their Fatal/Nonfatal word decides;
 * - application faults (13, 31, 43, 45 alone, 94) never propose a cordon alone; the
 *   `appRepeatCount`-th occurrence on one GPU within `appRepeatWindowMs` does;
 * - "caused by previous Xid N" is judged by the worse of the two.
 * A fault without a GPU index keeps its PCI bus id, so faults of two unmapped GPUs stay apart.
 */
import type { FaultEvent } from '../../schema/events.js';
import type { Action, Severity } from '../../schema/finding.js';
import { type FindingLog, findingId } from '../findings.js';
import { type ActionClass, RECOVERY_ACTIONS, type TriageRow, triageRow, worse } from './triage.js';

export interface TriageConfig {
  /** Identical (GPU, code) lines closer than this are one occurrence. */
  sameOccurrenceMs: number;
  /** The same for events a collector already counted (`count`, e.g. dcgm-exporter scrapes). */
  countedOccurrenceMs: number;
  /** How long an NVLink5 Xid waits for the driver's Xid 154. */
  nvlinkWaitMs: number;
  /** Application faults on one GPU that make it a suspect… */
  appRepeatCount: number;
  /** …within this window. */
  appRepeatWindowMs: number;
}

/** How close a 45 must be to another Xid of its GPU to be that Xid's cleanup. */
const COMPANION_MS = 60_000;

export const TRIAGE_DEFAULTS: TriageConfig = {
  sameOccurrenceMs: 10_000,
  // Two scrapes of dcgm-exporter's default 30 s interval, with room for one missed.
  countedOccurrenceMs: 90_000,
  nvlinkWaitMs: 30_000,
  appRepeatCount: 3,
  appRepeatWindowMs: 3_600_000,
};

const ACTION: Record<ActionClass, Action> = {
  record: 'none',
  restart_app: 'none',
  reset_gpu: 'cordon',
  // A reboot takes the whole node: drain it first.
  reboot_node: 'drain',
  drain_reset: 'drain',
  rma: 'rma',
};
const SEVERITY: Record<ActionClass, Severity> = {
  record: 'info',
  restart_app: 'warning',
  reset_gpu: 'warning',
  reboot_node: 'critical',
  drain_reset: 'critical',
  rma: 'critical',
};

/** Fields the collectors add to an XID fault (extensions of the v1 contract). */
interface XidDetail {
  pci_bus_id?: string;
  recovery_action?: number;
  recovery_action_name?: string;
  /** Lines a collector already folded into this event (dcgm-exporter's count rise). */
  count?: number;
  nvlink_fatal?: boolean;
  root_cause_xid?: number;
  xid_inferred?: boolean;
}
type Fault = FaultEvent & XidDetail;

interface Occurrence {
  /** The finding that counts it; undefined while an NVLink Xid waits or after a 154 absorbed it. */
  id?: string;
  lastTs: number;
  count: number;
}

interface Override {
  action: ActionClass;
  code: number;
  id: string;
}

interface Pending {
  e: Fault;
  key: string;
  gpuKey: string;
  deadline: number;
}

export class FaultTriage {
  private readonly occurrences = new Map<string, Occurrence>();
  private readonly overrides = new Map<string, Override>();
  private readonly appFaults = new Map<string, number[]>();
  /** When each GPU last had a hardware Xid: a 45 next to one is its cleanup. */
  private readonly hardwareTs = new Map<string, number>();
  private pending: Pending[] = [];

  constructor(
    private readonly log: FindingLog,
    private readonly cfg: TriageConfig = TRIAGE_DEFAULTS,
  ) {}

  /** The driver's current verdict for a GPU ("host/gpu" or "host/bus"), if a 154 set one. */
  overrideFor(host: string, gpu: number | string): ActionClass | undefined {
    return this.overrides.get(`${host}/${gpu}`)?.action;
  }

  process(e: FaultEvent): void {
    if (e.source !== 'xid' && e.source !== 'ecc') return;
    this.advance(e.ts);
    const d = e as Fault;
    const code = typeof e.code === 'number' ? e.code : Number.parseInt(String(e.code ?? ''), 10);
    const gpuKey = `${e.host}/${e.gpu ?? d.pci_bus_id ?? '*'}`;
    const ra = code === 154 && typeof d.recovery_action === 'number' ? `:${d.recovery_action}` : '';
    const key = `${gpuKey}|${e.source}|${Number.isFinite(code) ? code : e.code}${ra}`;
    if (this.repeat(key, e.ts, lineCount(d), typeof d.count === 'number')) return;
    const row = e.source === 'xid' && Number.isFinite(code) ? triageRow(code) : undefined;
    if (code === 154 && e.source === 'xid' && typeof d.recovery_action === 'number') {
      this.recoveryAction(d, gpuKey, key);
      return;
    }
    if (row?.awaits154 && !this.overrides.has(gpuKey)) {
      this.occurrences.set(key, { lastTs: e.ts, count: lineCount(d) });
      this.pending.push({ e: d, key, gpuKey, deadline: e.ts + this.cfg.nvlinkWaitMs });
      return;
    }
    this.open(d, code, row, gpuKey, key, '');
  }

  /** Judges NVLink Xids whose wait for a 154 ended before `now` (event time). */
  advance(now: number): void {
    if (this.pending.length === 0 || this.pending[0].deadline > now) return;
    const due = this.pending.filter((p) => p.deadline <= now);
    this.pending = this.pending.filter((p) => p.deadline > now);
    for (const p of due) {
      const code = Number(p.e.code);
      const waited = `; no Xid 154 within ${Math.round(this.cfg.nvlinkWaitMs / 1000)} s`;
      // Lines of it that came while it waited count too.
      const seen = this.occurrences.get(p.key)?.count ?? lineCount(p.e);
      this.open(p.e, code, triageRow(code), p.gpuKey, p.key, waited, seen);
    }
  }

  /** End of input: what still waits for a 154 is judged now. */
  flush(): void {
    this.advance(Number.POSITIVE_INFINITY);
  }

  /** Counts a line of an occurrence already seen; true when it was one. */
  private repeat(key: string, ts: number, lines: number, counted: boolean): boolean {
    const occ = this.occurrences.get(key);
    const gap = counted ? this.cfg.countedOccurrenceMs : this.cfg.sameOccurrenceMs;
    if (!occ || Math.abs(ts - occ.lastTs) > gap) return false;
    const before = occ.count;
    occ.count += lines;
    occ.lastTs = Math.max(occ.lastTs, ts);
    const f = occ.id ? this.log.get(occ.id) : undefined;
    if (f && occ.id) {
      const patch = { evidence: { ...f.evidence, count: occ.count, last_ts: occ.lastTs } };
      // Powers of ten: a storm of a million lines is six updates, not a million.
      if (Math.floor(Math.log10(occ.count)) > Math.floor(Math.log10(before)))
        this.log.update(occ.id, ts, patch, true);
      else this.log.amend(occ.id, patch);
    }
    return true;
  }

  private recoveryAction(e: Fault, gpuKey: string, key: string): void {
    const code = e.recovery_action as number;
    const known = RECOVERY_ACTIONS[code];
    const name = e.recovery_action_name ?? known?.name ?? 'unknown';
    const prev = this.overrides.get(gpuKey);
    const hex = `0x${code.toString(16)}`;
    if (known && known.action === undefined) {
      this.occurrences.set(key, { lastTs: e.ts, count: 1 });
      if (!prev) return;
      this.overrides.delete(gpuKey);
      this.log.resolve(prev.id, e.ts, {
        summary: `${where(e)}: the driver's recovery action is back to None (Xid 154 to ${hex}); the GPU recovered.`,
      });
      return;
    }
    // An action code NVML does not list yet: a reset is the least that clears any of them.
    const action = known?.action ?? 'reset_gpu';
    const absorbed = this.takePending(gpuKey);
    const evidence = {
      code: 154,
      class: 'GPU recovery action changed',
      recovery: action,
      bucket: 'XID_154_EVAL',
      recovery_action: code,
      recovery_action_name: name,
      message: e.message,
      count: 1,
      ...(absorbed.length ? { nvlink_xids: absorbed } : {}),
      ...(e.pci_bus_id ? { pci_bus_id: e.pci_bus_id } : {}),
    };
    const causes = absorbed.length ? `, after NVLink Xid ${absorbed.join(', ')}` : '';
    const summary = `${where(e)}: XID 154 (GPU recovery action changed; the driver asks for ${hex} (${name})${causes}); recovery: ${action}.`;
    const draft = { action: ACTION[action], severity: SEVERITY[action], evidence, summary };
    if (prev) {
      this.log.update(prev.id, e.ts, draft, true);
      this.overrides.set(gpuKey, { ...prev, action });
      this.occurrences.set(key, { id: prev.id, lastTs: e.ts, count: 1 });
      return;
    }
    const id = findingId('xid', e.job, e.host, e.gpu ?? e.pci_bus_id, 154, e.ts);
    this.log.openFinding(id, e.ts, {
      type: 'xid',
      job: e.job,
      host: e.host,
      gpu: e.gpu,
      rank: e.rank,
      onset_ts: e.ts,
      ...draft,
    });
    this.overrides.set(gpuKey, { action, code, id });
    this.occurrences.set(key, { id, lastTs: e.ts, count: 1 });
  }

  /** NVLink Xids of this GPU still waiting: the 154 that came decides for them. */
  private takePending(gpuKey: string): number[] {
    const mine = this.pending.filter((p) => p.gpuKey === gpuKey);
    if (mine.length === 0) return [];
    this.pending = this.pending.filter((p) => p.gpuKey !== gpuKey);
    return [...new Set(mine.map((p) => Number(p.e.code)))];
  }

  private open(
    e: Fault,
    code: number,
    row: TriageRow | undefined,
    gpuKey: string,
    key: string,
    extraNote: string,
    count = lineCount(e),
  ): void {
    const extra: Record<string, unknown> = {};
    let note = extraNote;
    let name: string;
    let action: ActionClass;
    let bucket: string | undefined;
    if (e.source === 'ecc') {
      name = `ECC ${e.message}`;
      action = eccAction(e.message);
    } else {
      name = row?.name ?? `XID ${code} (not in rankwatch's table)`;
      action = row?.action ?? 'record';
      bucket = row?.bucket;
      if (row?.awaits154 && typeof e.nvlink_fatal === 'boolean') {
        action = e.nvlink_fatal ? 'reset_gpu' : 'record';
        extra.nvlink_fatal = e.nvlink_fatal;
        note += e.nvlink_fatal ? '; Fatal' : '; Nonfatal';
      }
      if (typeof e.root_cause_xid === 'number' && e.root_cause_xid !== code) {
        const root = triageRow(e.root_cause_xid);
        extra.root_cause_xid = e.root_cause_xid;
        extra.root_cause_class = root?.name ?? `XID ${e.root_cause_xid}`;
        if (root) action = worse(action, root.action);
        note += `; caused by XID ${e.root_cause_xid} (${extra.root_cause_class})`;
      }
      const hw = this.hardwareTs.get(gpuKey);
      if (
        code === 45 &&
        action === 'restart_app' &&
        hw !== undefined &&
        Math.abs(e.ts - hw) <= COMPANION_MS
      ) {
        // WORKFLOW_XID_45: with another Xid on the GPU it is that Xid's cleanup; record it only.
        action = 'record';
        note += "; cleanup after the GPU's other Xid";
      }
      if (row?.app && action === 'restart_app') {
        const n = this.appFault(gpuKey, e.ts);
        extra.app_faults_in_window = n;
        if (n >= this.cfg.appRepeatCount) {
          action = 'reset_gpu';
          extra.escalated = true;
          const h = Math.round(this.cfg.appRepeatWindowMs / 360_000) / 10;
          note += `; application fault number ${n} on this GPU within ${h} h: suspect the GPU`;
        }
      }
      const over = this.overrides.get(gpuKey);
      if (over && code !== 154) {
        action = over.action;
        extra.driver_override = over.action;
        extra.related_finding = over.id;
        note += `; the driver's last Xid 154 asks for ${over.action}`;
      }
      if (e.xid_inferred) {
        extra.xid_inferred = true;
        note += '; from the kernel message, no Xid line';
      }
    }
    const id = findingId(e.source, e.job, e.host, e.gpu ?? e.pci_bus_id, code, e.ts);
    const known = row !== undefined || e.source === 'ecc';
    this.log.openFinding(id, e.ts, {
      type: e.source,
      job: e.job,
      host: e.host,
      gpu: e.gpu,
      rank: e.rank,
      // An unknown code: a person should look, nothing should act.
      severity: known ? SEVERITY[action] : 'warning',
      onset_ts: e.ts,
      action: known ? ACTION[action] : 'watch',
      evidence: {
        code: Number.isFinite(code) ? code : e.code,
        class: name,
        recovery: action,
        ...(bucket ? { bucket } : {}),
        message: e.message,
        count,
        ...(e.pci_bus_id ? { pci_bus_id: e.pci_bus_id } : {}),
        ...extra,
      },
      summary: `${where(e)}: ${e.source.toUpperCase()} ${Number.isFinite(code) ? code : ''} (${name}${note}); recovery: ${action}.`,
    });
    this.occurrences.set(key, {
      id,
      lastTs: Math.max(e.ts, this.occurrences.get(key)?.lastTs ?? e.ts),
      count,
    });
    if (e.source === 'xid' && !row?.app && action !== 'record') this.hardwareTs.set(gpuKey, e.ts);
    this.prune(e.ts);
  }

  /** Records an application fault occurrence on a GPU; returns how many fall in the window. */
  private appFault(gpuKey: string, ts: number): number {
    const from = ts - this.cfg.appRepeatWindowMs;
    const list = (this.appFaults.get(gpuKey) ?? []).filter((t) => t > from);
    list.push(ts);
    this.appFaults.set(gpuKey, list);
    return list.length;
  }

  /** Forgets occurrences long over, so state stays bounded by the GPUs that fault. */
  private prune(now: number): void {
    if (this.occurrences.size < 4096) return;
    const keep = Math.max(this.cfg.sameOccurrenceMs, this.cfg.countedOccurrenceMs);
    for (const [k, o] of this.occurrences) if (now - o.lastTs > keep) this.occurrences.delete(k);
    for (const [k, t] of this.hardwareTs) if (now - t > COMPANION_MS) this.hardwareTs.delete(k);
  }
}

function lineCount(e: Fault): number {
  return typeof e.count === 'number' && e.count >= 1 ? Math.floor(e.count) : 1;
}

function where(e: Fault): string {
  return `${e.host}${e.gpu !== undefined ? `/${e.gpu}` : e.pci_bus_id ? ` (PCI ${e.pci_bus_id})` : ''}`;
}

/** ECC signals without an Xid code, judged by their words. */
function eccAction(message: string): ActionClass {
  if (/remap\w*\s+fail|retire\w*\s+fail/i.test(message)) return 'rma';
  if (/\bdouble\b|\buncorrect|\bdbe\b/i.test(message)) return 'drain_reset';
  if (/remap\w*\s+pending|pending\s+remap/i.test(message)) return 'reset_gpu';
  return 'record';
}
