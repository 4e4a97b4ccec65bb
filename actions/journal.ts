/** Rows for the tables of migration 3: node health transitions and the action audit. */
import type { Transition } from '../detectors/health/health.js';
import type { InsertBatch } from '../store/rows.js';

export type Outcome = 'done' | 'dry_run' | 'refused' | 'pending_approval' | 'failed' | 'approved';

export interface AuditEntry {
  ts: number;
  /** The action's id: approval and retries refer to it. */
  id: string;
  host: string;
  /** `reconcile`: the stored state brought in line with the scheduler at start. */
  verb: 'cordon' | 'uncordon' | 'breaker_trip' | 'breaker_reset' | 'reconcile';
  driver: string;
  outcome: Outcome;
  reason: string;
  finding_id: string;
  /** `rankwatch` when automatic; the token name of the person otherwise. */
  actor: string;
  attempts: number;
}

export function transitionRows(ts: readonly Transition[]): InsertBatch {
  return {
    table: 'node_health',
    rows: ts.map((t) =>
      JSON.stringify({
        ts: Math.round(t.ts),
        host: t.host,
        gpu: t.gpu ?? -1,
        from_state: t.from,
        to_state: t.to,
        reason: t.reason,
        evidence: t.evidence,
        actor: t.actor,
        needs_human: t.needs_human ? 1 : 0,
      }),
    ),
  };
}

export function auditRows(entries: readonly AuditEntry[]): InsertBatch {
  return {
    table: 'action_audit',
    rows: entries.map((a) => JSON.stringify({ ...a, ts: Math.round(a.ts) })),
  };
}
