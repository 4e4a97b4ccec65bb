/**
 * How the repair loop's decisions are seen besides the audit table: one log line per decision,
 * and the breaker's own finding (open while tripped), which goes where findings go (alerts, store).
 */
import type { Logger } from '../core/log.js';
import type { Finding } from '../schema/finding.js';
import type { Limit } from './governor.js';
import type { AuditEntry } from './journal.js';

/** The breaker's own finding type: open while tripped. */
export const BREAKER_FINDING = 'cordon_breaker';

/**
 * `action VERB HOST OUTCOME[ (LIMIT)]: REASON`, with the entry as fields: done and dry-run at
 * info, refusals at warn, failures and a breaker trip at error.
 */
export function logDecision(log: Logger, a: AuditEntry, limit: Limit | undefined): void {
  const fields = {
    action: {
      id: a.id,
      verb: a.verb,
      host: a.host,
      outcome: a.outcome,
      finding_id: a.finding_id,
      actor: a.actor,
    },
    ...(limit ? { limit } : {}),
  };
  const msg = `action ${a.verb} ${a.host || 'fleet'} ${a.outcome}${limit ? ` (${limit})` : ''}: ${a.reason}`;
  if (a.verb === 'breaker_trip' || a.outcome === 'failed') log.error(fields, msg);
  else if (a.outcome === 'refused') log.warn(fields, msg);
  else log.info(fields, msg);
}

/** The breaker's finding: one id per trip, so alerts and the store see one incident. */
export function breakerFinding(
  trip: { at: number; reason: string },
  state: 'open' | 'resolved',
  o: { actor: string; now: number; mode: string; driver: string },
): Finding {
  const dry = o.mode === 'dry_run';
  const open = `Cordon breaker tripped: ${trip.reason}; every cordon is refused until an admin resets it (POST /v1/breaker/reset)${dry ? ' (dry-run: nothing was touched)' : ''}.`;
  return {
    id: `cordon-breaker-${trip.at}`,
    ts: state === 'open' ? trip.at : o.now,
    type: BREAKER_FINDING,
    state,
    host: '',
    severity: dry ? 'warning' : 'critical',
    onset_ts: trip.at,
    evidence: { reason: trip.reason, mode: o.mode, driver: o.driver },
    action: 'none',
    summary: state === 'open' ? open : `${open} Reset by ${o.actor}.`,
  };
}
