/**
 * What each node is in the repair loop's durable state (healthy, suspect, cordoned, repairing,
 * verifying), for GET /v1/nodes and the fleet page: state, not what open findings ask for. Read
 * from the acting loop when this process leads it, else from the latest snapshot in the store
 * (what the leader wrote), so every server shows the same state.
 */
import type { HealthState } from '../detectors/health/health.js';
import { latestState } from '../store/automation-state.js';
import type { Store } from '../store/store.js';
import type { Automation } from './automation.js';
import { type AutomationSnapshot, STATE_SCOPE } from './state.js';

export interface NodeState {
  state: HealthState;
  /** The scheduler has it out by rankwatch's hand. */
  out_by_rankwatch: boolean;
  /** A dry-run took it out on paper only: the scheduler never heard of it. */
  dry_run_out: boolean;
  needs_human: boolean;
  since: number | null;
  reason: string | null;
}

export const HEALTHY: NodeState = {
  state: 'healthy',
  out_by_rankwatch: false,
  dry_run_out: false,
  needs_human: false,
  since: null,
  reason: null,
};

/** Hosts with a state other than healthy, or out by rankwatch, from one snapshot. */
export function nodeStatesOf(
  s: Pick<AutomationSnapshot, 'health' | 'out' | 'dryOut'>,
): Map<string, NodeState> {
  const out = new Map<string, NodeState>();
  for (const u of s.health)
    if (u.gpu === undefined && u.state !== 'healthy')
      out.set(u.host, {
        state: u.state,
        out_by_rankwatch: false,
        dry_run_out: false,
        needs_human: u.needsHuman,
        since: u.since ?? null,
        reason: u.reason ?? null,
      });
  for (const [flag, records] of [
    ['out_by_rankwatch', s.out],
    ['dry_run_out', s.dryOut ?? []],
  ] as const)
    for (const r of records) {
      const n = out.get(r.host) ?? {
        ...HEALTHY,
        since: r.since,
        reason: `taken out for a ${r.type} finding`,
      };
      out.set(r.host, { ...n, [flag]: true });
    }
  return out;
}

/** The nodes' states now: the leading loop's own, else the store's latest snapshot (none: all healthy). */
export async function nodeStates(
  store: Pick<Store, 'query'>,
  automation: Automation | undefined,
): Promise<Map<string, NodeState>> {
  if (automation?.active) return nodeStatesOf(automation.snapshot());
  const stored = await latestState<AutomationSnapshot>(store, STATE_SCOPE);
  return stored ? nodeStatesOf(stored.state) : new Map();
}
