/**
 * Runs the repair loop behind the leader lease (store/lease.ts), so that of every process sharing
 * a store exactly one decides and acts. At start and on every tick (`tickMs`): the leader renews;
 * a process that does not lead tries to take the lease; on taking it, the loop reads the stored
 * state back and reconciles it with the scheduler (Automation.takeOver) before deciding anything.
 * Losing the lease (a renewal finds another epoch, or the store is unreachable for longer than
 * the lease's margin allows) stops decisions at once. A clean stop writes the state and releases
 * the lease, so a successor takes over without waiting for it to expire.
 *
 * While it leads but cannot take over (the scheduler or the store cannot be read), or the breaker
 * is tripped, its health check is degraded: the process keeps ingesting and detecting, and the
 * reason says what a person must do.
 */
import { hostname } from 'node:os';
import type { Health } from '../core/health.js';
import type { Logger } from '../core/log.js';
import { latestStateEpoch } from '../store/automation-state.js';
import { LEASE_DEFAULTS, Lease } from '../store/lease.js';
import type { Store } from '../store/store.js';
import type { Automation, TakeOverReport } from './automation.js';
import { STATE_SCOPE, StateJournal } from './state.js';
import type { StoreFeed } from './store-feed.js';

export interface RepairLoopOptions {
  automation: Automation;
  store: Store;
  journal: StateJournal;
  lease: Lease;
  logger: Logger;
  /** Read inputs back from the store (processes sharing one) instead of the process's own pipeline. */
  feed?: StoreFeed;
  /** Renew / try to take the lease, and poll the feed, this often (default 5 s). */
  tickMs?: number;
  /** Re-read the scheduler's node count this often (default 5 min). */
  fleetRefreshMs?: number;
}

/** An owner name a person can find: host, pid and a random part. */
export function leaseOwner(): string {
  return `${hostname()}:${process.pid}:${Math.random().toString(36).slice(2, 8)}`;
}

/** The journal and lease of a repair loop over `store` (`exclusive`: no other process can share it). */
export function durableParts(
  store: Store,
  exclusive: boolean,
  owner = leaseOwner(),
): { journal: StateJournal; lease: Lease } {
  const journal = new StateJournal(store, owner);
  const lease = new Lease(store, {
    scope: STATE_SCOPE,
    owner,
    ...LEASE_DEFAULTS,
    exclusive,
    minEpoch: () => latestStateEpoch(store, STATE_SCOPE),
  });
  return { journal, lease };
}

export class RepairLoop {
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private stopped = false;
  /** Why the leader cannot act (take-over failed), for the health check. */
  private blocked: { since: number; reason: string } | undefined;
  private lastFleet = 0;
  private standbyLogged = '';
  /**
   * While starting, what the first tick found is kept for the start-up line (describe()) instead
   * of logged: a port that then fails to open stays the only line of a failed start.
   */
  private starting = true;
  private startNote = '';

  constructor(private readonly o: RepairLoopOptions) {}

  get automation(): Automation {
    return this.o.automation;
  }

  /** Its inputs come from the store, not from the process's own pipeline. */
  get fedFromStore(): boolean {
    return this.o.feed !== undefined;
  }

  /** Leads and has taken over: its decisions count. */
  get leading(): boolean {
    return this.o.automation.active && this.o.lease.holds();
  }

  /** Migrates the store, tries to lead once, then keeps trying (or renewing) every tick. */
  async start(): Promise<void> {
    await this.o.store.migrate();
    await this.tick();
    this.starting = false;
    const every = this.o.tickMs ?? 5_000;
    this.timer = setInterval(() => {
      this.ticking ??= this.tick().finally(() => {
        this.ticking = undefined;
      });
    }, every);
    this.timer.unref();
  }

  /** Stops ticking; writes the state and gives the lease up. Idempotent. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.ticking;
    await this.o.automation.idle();
    this.o.automation.standDown();
    await this.o.lease.release().catch(() => undefined);
  }

  /** The start-up line: mode, driver, budget, breaker, leadership. */
  describe(): string {
    const l = this.o.lease;
    const who = this.leading
      ? `leader (lease epoch ${l.epoch})${this.startNote ? `: ${this.startNote}` : ''}`
      : l.epoch > 0
        ? `leader (lease epoch ${l.epoch}), not acting: ${this.blocked?.reason ?? 'taking over'}`
        : `standby (${this.standbyLogged ? `the leader is ${this.standbyLogged}` : 'another process leads'})`;
    return `${this.o.automation.describe()} · ${who}`;
  }

  /** The `actions` health check: degraded while the breaker is tripped or the leader cannot act. */
  watch(health: Health): void {
    health.probe(
      'actions',
      () => {
        const trip = this.o.automation.governor.trip();
        if (trip)
          return {
            failingSince: trip.at,
            reason: `cordon breaker tripped (${trip.reason}): every cordon is refused until an admin resets it with POST /v1/breaker/reset`,
          };
        if (this.blocked) return { failingSince: this.blocked.since, reason: this.blocked.reason };
        const j = this.o.journal;
        if (j.lastError)
          return { failingSince: Date.now(), reason: `repair loop state not written: ${j.lastError}` };
        return undefined;
      },
      { degraded: true },
    );
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    const { lease, automation, logger } = this.o;
    try {
      const had = lease.epoch;
      const held = had > 0 ? await lease.renew() : await lease.acquire();
      if (!held) {
        if (automation.active) {
          automation.standDown();
          logger.warn('repair loop: lost the leader lease; deciding nothing until it is taken again');
        }
        this.blocked = undefined;
        const h = await lease.holder();
        const line = h ? `${h.owner} (epoch ${h.epoch})` : 'nobody yet';
        if (line !== this.standbyLogged) {
          this.standbyLogged = line;
          if (!this.starting) logger.info(`repair loop: standby; the leader is ${line}`);
        }
        return;
      }
      if (!automation.active) await this.takeOver(lease.epoch);
      if (!automation.active) return;
      if (this.o.feed) await this.o.feed.poll();
      const every = this.o.fleetRefreshMs ?? 300_000;
      if (Date.now() - this.lastFleet > every) {
        this.lastFleet = Date.now();
        await automation.refreshFleet().catch(() => undefined);
      }
    } catch (err) {
      logger.warn(
        `repair loop: ${(err as Error).message}; trying again in ${(this.o.tickMs ?? 5_000) / 1000} s`,
      );
    }
  }

  private async takeOver(epoch: number): Promise<void> {
    const { automation, logger } = this.o;
    let r: TakeOverReport;
    try {
      r = await automation.takeOver(epoch);
    } catch (err) {
      const reason = `leads but cannot take over: ${(err as Error).message}; nothing is decided until it can`;
      if (this.blocked?.reason !== reason && !this.starting) logger.error(`repair loop: ${reason}`);
      this.blocked = { since: this.blocked?.since ?? Date.now(), reason };
      return;
    }
    this.blocked = undefined;
    this.lastFleet = Date.now();
    const parts = [
      r.restored ? 'state restored from the store' : 'no stored state (first start)',
      ...(r.adopted.length ? [`adopted ${r.adopted.join(', ')} (out by rankwatch in the scheduler)`] : []),
      ...(r.released.length ? [`released ${r.released.join(', ')} (back, or held by a person)`] : []),
      ...(r.interrupted.length ? [`interrupted drains: ${r.interrupted.join(', ')}`] : []),
    ];
    if (this.starting) this.startNote = parts.join('; ');
    else logger.info(`repair loop: leading (lease epoch ${epoch}); ${parts.join('; ')}`);
  }
}
