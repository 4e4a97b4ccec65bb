/** Reads of the cordon automation's tables (migration 5): the action audit, newest first. */
import type { AuditEntry } from '../actions/journal.js';
import { type TimeRange, timeFilter, where } from './queries.js';
import type { Store } from './store.js';

type Row = Record<string, string | number | null>;

export async function auditLog(
  store: Store,
  f: TimeRange & { host?: string; limit?: number } = {},
): Promise<AuditEntry[]> {
  const p: Record<string, unknown> = { limit: f.limit ?? 100 };
  const conds = timeFilter('ts', f, p);
  if (f.host !== undefined) {
    p.host = f.host;
    conds.push('host = {host:String}');
  }
  const rows = await store.query<Row>(
    `SELECT toUnixTimestamp64Milli(ts) AS t, id, host, verb, driver, outcome, reason, finding_id, actor, attempts
     FROM action_audit FINAL ${where(conds)} ORDER BY ts DESC, id DESC LIMIT {limit:UInt32}`,
    p,
  );
  return rows.map((r) => ({
    ts: Number(r.t),
    id: String(r.id),
    host: String(r.host),
    verb: String(r.verb) as AuditEntry['verb'],
    driver: String(r.driver),
    outcome: String(r.outcome) as AuditEntry['outcome'],
    reason: String(r.reason),
    finding_id: String(r.finding_id),
    actor: String(r.actor),
    attempts: Number(r.attempts),
  }));
}
