/**
 * Scores findings against what the simulator injected: which fault each finding names (same
 * host, and the same GPU unless the fault or the finding is host-wide), how long after onset it
 * opened (event time), and how far its cost estimate is from the true cost.
 */
import type { Finding } from '../schema/finding.js';
import type { InjectedFault } from './cluster.js';

/** Finding types that count as catching each fault. */
export const CATCHES: Record<string, string[]> = {
  throttle: ['throttle', 'straggler'],
  slow_rank: ['straggler'],
  intermittent: ['straggler'],
  nic: ['slow_link'],
  link: ['slow_link'],
  power_brake: ['throttle', 'straggler'],
  xid: ['xid'],
  flap: ['slow_link'],
  drift: ['straggler'],
  nvlink: ['slow_link'],
  hang: ['nccl_hang'],
  hang_allreduce: ['nccl_hang'],
  stall: ['recurring_stall'],
};

/** Types whose findings on a clean job are false alarms (hang types: a hang named on a rank that did not hang). */
export const JUDGED_TYPES = new Set([
  'straggler',
  'throttle',
  'slow_link',
  'mfu_drop',
  'nccl_hang',
  'nccl_desync',
  'nccl_rank_behind',
  'recurring_stall',
]);

export interface FaultScore {
  fault: InjectedFault;
  detected: boolean;
  /** First matching finding. */
  first?: Finding;
  ttdMs?: number;
  /** Cost estimate of the matching straggler/slow_link finding (latest), percent. */
  estCostPct?: number;
}

export interface RunScore {
  faults: FaultScore[];
  /** Opened findings that match no injected fault, of the judged types. */
  falseFindings: Finding[];
}

export function matches(f: Finding, fault: InjectedFault): boolean {
  if (!CATCHES[fault.spec.type]?.includes(f.type)) return false;
  const hostMatch = f.host === fault.host || f.peer_host === fault.host;
  if (!hostMatch) return false;
  if (fault.peerHost !== undefined && ![f.host, f.peer_host].includes(fault.peerHost)) return false;
  if (fault.gpu === undefined || f.gpu === undefined) return true;
  // An intra-host pair (NVLink between two GPUs) is named by either end.
  const gpus = f.evidence?.gpus;
  if (Array.isArray(gpus) && gpus.length === 2) return gpus.includes(fault.gpu);
  return f.gpu === fault.gpu;
}

export function scoreRun(findings: Finding[], faults: InjectedFault[]): RunScore {
  const opens = findings.filter((f) => f.state === 'open');
  const used = new Set<string>();
  const scores = faults.map((fault): FaultScore => {
    const hits = opens.filter((f) => matches(f, fault) && f.ts >= (fault.startTs ?? fault.onsetTs ?? 0));
    for (const h of hits) used.add(h.id);
    const first = hits.sort((a, b) => a.ts - b.ts)[0];
    const costIds = new Set(hits.filter((h) => h.est_cost_pct !== undefined).map((h) => h.id));
    // The incident's last word (a resolved event carries the final figures).
    const latest = findings.filter((f) => costIds.has(f.id)).at(-1);
    return {
      fault,
      detected: first !== undefined,
      first,
      // Found before it passed the visible level (a drift): detected at once.
      ttdMs: first && fault.onsetTs !== undefined ? Math.max(0, first.ts - fault.onsetTs) : undefined,
      estCostPct: latest?.est_cost_pct,
    };
  });
  // Findings that explain a matched one (linked) are not false alarms either.
  for (const f of opens) if (f.related?.some((id) => used.has(id))) used.add(f.id);
  const falseFindings = opens.filter((f) => JUDGED_TYPES.has(f.type) && !used.has(f.id));
  return { faults: scores, falseFindings };
}
