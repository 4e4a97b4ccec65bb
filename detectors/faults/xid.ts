/**
 * XID and ECC faults, classified as NVIDIA's XID catalogue and GPU memory error-recovery notes
 * describe them: what the node needs next (nothing, a job retry, a GPU reset, a reboot, a drain,
 * an RMA). What the fault itself says refines its code's class: Xid 154's recovery action, the
 * Fatal/Nonfatal word of NVLink Xids 144–150, and the root cause of a "caused by previous Xid N".
 * A fault without a GPU index keeps its PCI bus id, so faults of two unmapped GPUs stay apart.
 */
import type { FaultEvent } from '../../schema/events.js';
import type { Action, Severity } from '../../schema/finding.js';
import { type FindingLog, findingId } from '../findings.js';

export type Recovery = 'app' | 'retry' | 'reset' | 'reboot' | 'drain' | 'rma';

/** From least to most disruptive: the root cause and its consequence are judged by the worse. */
const ORDER: Recovery[] = ['app', 'retry', 'reset', 'reboot', 'drain', 'rma'];

interface XidClass {
  name: string;
  recovery: Recovery;
}

/** The XIDs seen on training clusters; unknown codes are reported for a person to look at. */
export const XID_CLASSES: Record<number, XidClass> = {
  13: { name: 'Graphics engine exception', recovery: 'app' },
  31: { name: 'GPU memory page fault', recovery: 'app' },
  43: { name: 'GPU stopped processing', recovery: 'app' },
  45: { name: 'Preemptive cleanup, due to previous errors', recovery: 'retry' },
  48: { name: 'Double-bit ECC error', recovery: 'drain' },
  61: { name: 'Internal micro-controller breakpoint/warning', recovery: 'reset' },
  62: { name: 'Internal micro-controller halt', recovery: 'reset' },
  // A recorded remap (or retirement) takes effect only after a GPU reset (NVIDIA memory error notes).
  63: { name: 'ECC page retirement or row remapping recorded', recovery: 'reset' },
  64: { name: 'ECC page retirement or row remapping failure', recovery: 'drain' },
  74: { name: 'NVLink error', recovery: 'reset' },
  79: { name: 'GPU has fallen off the bus', recovery: 'drain' },
  92: { name: 'High single-bit ECC error rate', recovery: 'retry' },
  94: { name: 'Contained ECC error', recovery: 'reset' },
  95: { name: 'Uncontained ECC error', recovery: 'drain' },
  119: { name: 'GSP RPC timeout', recovery: 'reset' },
  120: { name: 'GSP error', recovery: 'reset' },
  140: { name: 'Unrecovered ECC error', recovery: 'drain' },
  // NVLink errors of newer GPUs: the message's Fatal/Nonfatal word decides (see nvlinkClass).
  144: { name: 'NVLink SAW error', recovery: 'reset' },
  145: { name: 'NVLink RLW error', recovery: 'reset' },
  146: { name: 'NVLink TLW error', recovery: 'reset' },
  147: { name: 'NVLink TREX error', recovery: 'reset' },
  148: { name: 'NVLink NVLPW control error', recovery: 'reset' },
  149: { name: 'NVLink NETIR error', recovery: 'reset' },
  150: { name: 'NVLink MSE error', recovery: 'reset' },
  // The driver's verdict on what the GPU needs now; its action code decides (see RECOVERY_ACTION).
  154: { name: 'GPU recovery action changed', recovery: 'reset' },
};

/** Xid 154's action codes (NVML's GPU recovery actions) → what the node needs. */
const RECOVERY_ACTION: Record<number, Recovery> = {
  0: 'app', // None: recovered
  1: 'reset', // GPU Reset Required
  2: 'reboot', // Node Reboot Required
  3: 'drain', // Drain P2P
  4: 'drain', // Drain and Reset
};

const ACTION: Record<Recovery, Action> = {
  app: 'none',
  retry: 'watch',
  reset: 'cordon',
  // A reboot takes the whole node: drain it first.
  reboot: 'drain',
  drain: 'drain',
  rma: 'rma',
};
const SEVERITY: Record<Recovery, Severity> = {
  app: 'info',
  retry: 'warning',
  reset: 'warning',
  reboot: 'critical',
  drain: 'critical',
  rma: 'critical',
};

export function classifyXid(code: number): XidClass {
  return XID_CLASSES[code] ?? { name: `XID ${code} (not in rankwatch's table)`, recovery: 'retry' };
}

/** Fields the collectors add to an XID fault (extensions of the v1 contract). */
interface XidDetail {
  pci_bus_id?: string;
  recovery_action?: number;
  recovery_action_name?: string;
  nvlink_fatal?: boolean;
  root_cause_xid?: number;
  xid_inferred?: boolean;
}

/** The code's class, refined by what this fault says about itself. */
function xidClass(code: number, d: XidDetail): XidClass & { extra: Record<string, unknown>; note: string } {
  const base = classifyXid(code);
  const extra: Record<string, unknown> = {};
  let recovery = base.recovery;
  let note = '';
  if (code === 154 && typeof d.recovery_action === 'number') {
    recovery = RECOVERY_ACTION[d.recovery_action] ?? base.recovery;
    const hex = `0x${d.recovery_action.toString(16)}`;
    extra.recovery_action = d.recovery_action;
    if (d.recovery_action_name) extra.recovery_action_name = d.recovery_action_name;
    note = `; the driver asks for ${hex}${d.recovery_action_name ? ` (${d.recovery_action_name})` : ''}`;
  }
  if (code >= 144 && code <= 150 && typeof d.nvlink_fatal === 'boolean') {
    recovery = d.nvlink_fatal ? 'reset' : 'retry';
    extra.nvlink_fatal = d.nvlink_fatal;
    note = d.nvlink_fatal ? '; Fatal' : '; Nonfatal';
  }
  if (typeof d.root_cause_xid === 'number' && d.root_cause_xid !== code) {
    const root = classifyXid(d.root_cause_xid);
    extra.root_cause_xid = d.root_cause_xid;
    extra.root_cause_class = root.name;
    if (ORDER.indexOf(root.recovery) > ORDER.indexOf(recovery)) recovery = root.recovery;
    note += `; caused by XID ${d.root_cause_xid} (${root.name})`;
  }
  if (d.xid_inferred) {
    extra.xid_inferred = true;
    note += '; from the kernel message, no Xid line';
  }
  return { name: base.name, recovery, extra, note };
}

/** Turns XID and ECC fault events into findings; other fault sources are stored, not judged here. */
export function findFault(e: FaultEvent, log: FindingLog): void {
  if (e.source !== 'xid' && e.source !== 'ecc') return;
  const code = typeof e.code === 'number' ? e.code : Number.parseInt(String(e.code ?? ''), 10);
  const d = e as FaultEvent & XidDetail;
  const bus = typeof d.pci_bus_id === 'string' ? d.pci_bus_id : undefined;
  const cls =
    e.source === 'xid'
      ? xidClass(code, d)
      : {
          name: `ECC ${e.message}`,
          recovery: (/\bdouble\b|\buncorrect|\bdbe\b/i.test(e.message) ? 'drain' : 'retry') as Recovery,
          extra: {},
          note: '',
        };
  // Without a GPU index the bus id tells GPUs apart: two unmapped GPUs are two findings.
  const id = findingId(e.source, e.job, e.host, e.gpu ?? bus, code, e.ts);
  const where = `${e.host}${e.gpu !== undefined ? `/${e.gpu}` : bus ? ` (PCI ${bus})` : ''}`;
  log.openFinding(id, e.ts, {
    type: e.source,
    job: e.job,
    host: e.host,
    gpu: e.gpu,
    rank: e.rank,
    severity: SEVERITY[cls.recovery],
    onset_ts: e.ts,
    action: ACTION[cls.recovery],
    evidence: {
      code: Number.isFinite(code) ? code : e.code,
      class: cls.name,
      recovery: cls.recovery,
      message: e.message,
      ...(bus ? { pci_bus_id: bus } : {}),
      ...cls.extra,
    },
    summary: `${where}: ${e.source.toUpperCase()} ${Number.isFinite(code) ? code : ''} (${cls.name}${cls.note}); recovery: ${cls.recovery}.`,
  });
}
