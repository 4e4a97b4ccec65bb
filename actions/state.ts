/**
 * The repair loop's durable state: what it is, and the journal that keeps it in the store. Every
 * change is written as a whole snapshot (node health, nodes out and why, the budget's windows,
 * the breaker, pending approvals), stamped with the lease epoch of the process that wrote it;
 * at start the latest is read back before the first decision (actions/automation.ts takeOver).
 * Writes are coalesced: while one is in flight, later changes wait for the next, which carries
 * them all. A write that fails is counted and retried with the next change; the scheduler's own
 * record (reconciled at start) covers what a crash between a change and its write loses.
 */
import type { UnitSnapshot } from '../detectors/health/health.js';
import type { Finding } from '../schema/finding.js';
import { latestState, type StoredState, stateRow } from '../store/automation-state.js';
import type { Store } from '../store/store.js';
import type { GovernorSnapshot } from './governor.js';

/** A node out (or, in dry-run, one that would be), by which finding. */
export interface OutRecord {
  host: string;
  /** The finding type that took it out (`xid`, `throttle`…), or `scheduler` when found out at start. */
  type: string;
  finding_id: string;
  since: number;
}

export interface PendingApproval {
  id: string;
  host: string;
  finding: Finding;
}

export interface AutomationSnapshot {
  v: 1;
  health: UnitSnapshot[];
  governor: GovernorSnapshot;
  /** Out of scheduling by rankwatch's hand. */
  out: OutRecord[];
  /** What a dry-run took out on paper. */
  dryOut: OutRecord[];
  pending: PendingApproval[];
  /** Open XID/ECC findings of hosts (resolved when the host comes back). */
  findings: Finding[];
  /** Hosts seen in events (the fleet when neither --fleet-size nor a scheduler says). */
  hosts: string[];
  /** The store feed's cursor (actions/store-feed.ts), when one feeds the loop. */
  feed?: unknown;
}

export const STATE_SCOPE = 'fleet';

export class StateJournal {
  /** The lease epoch writes are stamped with (the fencing token). */
  epoch = 0;
  private seq = 0;
  private running: Promise<void> | undefined;
  private again = false;
  errors = 0;
  lastError: string | undefined;
  writes = 0;

  constructor(
    private readonly store: Pick<Store, 'query' | 'insert'>,
    private readonly owner: string,
    readonly scope = STATE_SCOPE,
  ) {}

  load(): Promise<StoredState<AutomationSnapshot> | undefined> {
    return latestState<AutomationSnapshot>(this.store, this.scope);
  }

  /** Starts writing what `take()` returns (now, or after the write in flight); returns at once. */
  save(take: () => AutomationSnapshot): void {
    if (this.epoch === 0) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = (async () => {
      do {
        this.again = false;
        try {
          await this.store.insert([
            stateRow(
              this.scope,
              { epoch: this.epoch, seq: ++this.seq, owner: this.owner, at: Date.now() },
              take(),
            ),
          ]);
          this.writes++;
          this.lastError = undefined;
        } catch (err) {
          this.errors++;
          this.lastError = (err as Error).message;
        }
      } while (this.again);
    })().finally(() => {
      this.running = undefined;
    });
  }

  /** Resolves once every change so far is written (or its write failed). */
  async flushed(): Promise<void> {
    while (this.running) await this.running;
  }
}
