/**
 * Raw events older than the store's retention (`rawTtlDays`) are dropped by ClickHouse's TTL as
 * they are inserted, silently. Commands that insert count them here and say so once at the end,
 * so a replay of an old recording (or a simulation dated in the past) does not look lost.
 */
import { SCHEMA_DEFAULTS } from '../store/schema.js';

export class ExpiredCount {
  private readonly cutoff: number;
  private readonly days: number;
  count = 0;
  oldest = Number.POSITIVE_INFINITY;

  constructor(rawTtlDays: number | undefined, now = Date.now()) {
    this.days = rawTtlDays ?? SCHEMA_DEFAULTS.rawTtlDays;
    this.cutoff = now - this.days * 86_400_000;
  }

  see(ts: number): void {
    if (ts < this.cutoff) {
      this.count++;
      if (ts < this.oldest) this.oldest = ts;
    }
  }

  /** One line for stderr, or undefined when nothing arrived expired. */
  message(total: number): string | undefined {
    if (this.count === 0) return undefined;
    return (
      `${this.count} of ${total} events are older than the raw-data retention (${this.days} days, ` +
      `oldest ${new Date(this.oldest).toISOString()}): the store dropped them from the raw tables ` +
      '(events, steps) as they arrived; findings, MFU and rollups are kept. To keep them, give a longer ' +
      '--raw-ttl-days, or record recent times (rankwatch sim defaults to now; --start sets a time).'
    );
  }
}
