/**
 * XID and ECC faults, classified as NVIDIA's XID catalogue and GPU memory error-recovery notes
 * describe them: what the node needs next (nothing, a job retry, a GPU reset, a drain, an RMA).
 */
import type { FaultEvent } from '../../schema/events.js';
import type { Action, Severity } from '../../schema/finding.js';
import { type FindingLog, findingId } from '../findings.js';

export type Recovery = 'app' | 'retry' | 'reset' | 'drain' | 'rma';

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
};

const ACTION: Record<Recovery, Action> = {
  app: 'none',
  retry: 'watch',
  reset: 'cordon',
  drain: 'drain',
  rma: 'rma',
};
const SEVERITY: Record<Recovery, Severity> = {
  app: 'info',
  retry: 'warning',
  reset: 'warning',
  drain: 'critical',
  rma: 'critical',
};

export function classifyXid(code: number): XidClass {
  return XID_CLASSES[code] ?? { name: `XID ${code} (not in rankwatch's table)`, recovery: 'retry' };
}

/** Turns XID and ECC fault events into findings; other fault sources are stored, not judged here. */
export function findFault(e: FaultEvent, log: FindingLog): void {
  if (e.source !== 'xid' && e.source !== 'ecc') return;
  const code = typeof e.code === 'number' ? e.code : Number.parseInt(String(e.code ?? ''), 10);
  const cls: XidClass =
    e.source === 'xid'
      ? classifyXid(code)
      : {
          name: `ECC ${e.message}`,
          recovery: /\bdouble\b|\buncorrect|\bdbe\b/i.test(e.message) ? 'drain' : 'retry',
        };
  const id = findingId(e.source, e.job, e.host, e.gpu, code, e.ts);
  const where = `${e.host}${e.gpu !== undefined ? `/${e.gpu}` : ''}`;
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
    },
    summary: `${where}: ${e.source.toUpperCase()} ${Number.isFinite(code) ? code : ''} (${cls.name}); recovery: ${cls.recovery}.`,
  });
}
