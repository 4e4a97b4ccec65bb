/**
 * A leader lease in the store, so that of several processes sharing one ClickHouse (detects of one
 * group, an `up` beside them) exactly one acts at a time. ClickHouse has no locks; what it gives
 * honestly is insert deduplication on a single server: every contender inserts "epoch N+1 is mine"
 * under the same token (`take-SCOPE-N+1`), the engine keeps the first block and drops the rest,
 * and each reads back who got it (the migration lock of store/migrate.ts works the same way).
 *
 * The epoch is the fencing token: the holder stamps its state writes with it, and a state row of
 * a lower epoch never wins over a higher one (store/automation-state.ts). Expiry is judged on the
 * store's clock (`now64()`), so contenders' clocks do not matter; the holder, which cannot see the
 * store's clock between calls, holds only until `renewStarted + ttl - margin` by its own clock,
 * counted from before the renewal was sent, so it stops acting `margin` before anyone can take over.
 *
 * Failure modes (docs/actions.md): a holder paused longer than `margin` between checking and
 * acting (a stop-the-world pause, a scheduler call that outlasts it) can act after a successor
 * took over; the successor reconciles with the scheduler at takeover, but a change landing after
 * that is seen only at its next start. Deduplication is per server: on a cluster of replicas the
 * tables must be Replicated with insert quorum, or two takers can both win. A store that is
 * unreachable stops renewals: the holder stops acting after `ttl - margin`, and nobody acts until
 * the store is back. `exclusive` (chDB: one process per data folder by construction) takes the
 * lease at once, whatever a crashed predecessor left.
 */
import type { Store } from './store.js';

export interface LeaseOptions {
  /** What is led (one lease per scope). */
  scope: string;
  /** This process (host, pid, a random part). */
  owner: string;
  ttlMs: number;
  /** Stop acting this long before the lease could be taken over. */
  marginMs: number;
  /** No other process can share this store: take the lease whatever its state. */
  exclusive?: boolean;
  /** Epochs at or below this are taken (the highest epoch of state already written). */
  minEpoch?: () => Promise<number>;
  /** Local clock. */
  now?: () => number;
}

export const LEASE_DEFAULTS = { ttlMs: 30_000, marginMs: 15_000 };

export interface LeaseHolder {
  epoch: number;
  owner: string;
  /** Store-clock expiry (ms); 0 when released. */
  expires: number;
}

type Row = { epoch: number; kind: string; owner: string; at: number; expires: number; now: number };

export class Lease {
  /** The epoch held, 0 when not held. */
  epoch = 0;
  private validUntil = 0;
  private readonly now: () => number;

  constructor(
    private readonly store: Pick<Store, 'query' | 'insert'>,
    readonly o: LeaseOptions,
  ) {
    this.now = o.now ?? Date.now;
  }

  /** Held, and far enough from expiry to act (exclusive: held, since nobody else can take it). */
  holds(): boolean {
    return this.epoch > 0 && (this.o.exclusive === true || this.now() < this.validUntil);
  }

  /** Who holds the lease now, as the store says (undefined: nobody, or released or expired). */
  async holder(): Promise<LeaseHolder | undefined> {
    const s = await this.read();
    return s.holder && !s.free ? s.holder : undefined;
  }

  /** Takes the lease when it is free (or expired, or `exclusive`); true when held afterwards. */
  async acquire(): Promise<boolean> {
    if (this.holds()) return this.renew();
    const started = this.now();
    const s = await this.read();
    if (!s.free && !this.o.exclusive) {
      if (s.holder?.owner === this.o.owner && s.holder.epoch === this.epoch) return this.renew();
      this.epoch = 0;
      return false;
    }
    const floor = (await this.o.minEpoch?.()) ?? 0;
    const epoch = Math.max(s.epoch, floor) + 1;
    await this.store.insert([this.row(epoch, 'take', s.storeNow, `take-${this.o.scope}-${epoch}`)]);
    const after = await this.read(epoch);
    if (after.holder?.owner !== this.o.owner) {
      this.epoch = 0;
      return false;
    }
    this.epoch = epoch;
    this.validUntil = started + this.o.ttlMs - this.o.marginMs;
    return true;
  }

  /** Extends a held lease; false (and no longer held) when another epoch has begun or it expired. */
  async renew(): Promise<boolean> {
    if (this.epoch === 0) return false;
    if (this.o.exclusive) return true; // nobody else can read this store: nothing to tell them
    const started = this.now();
    const s = await this.read();
    if (s.epoch !== this.epoch || s.holder?.owner !== this.o.owner || s.free) {
      this.epoch = 0;
      return false;
    }
    await this.store.insert([this.row(this.epoch, 'renew', s.storeNow)]);
    this.validUntil = started + this.o.ttlMs - this.o.marginMs;
    return true;
  }

  /** Gives the lease up (a clean stop), so a successor takes over at once. */
  async release(): Promise<void> {
    if (this.epoch === 0) return;
    const epoch = this.epoch;
    this.epoch = 0;
    await this.store.insert([this.row(epoch, 'release', this.now())]);
  }

  private row(epoch: number, kind: string, storeNow: number, token?: string) {
    return {
      table: 'automation_lease',
      ...(token ? { token } : {}),
      rows: [
        JSON.stringify({
          scope: this.o.scope,
          epoch,
          kind,
          owner: this.o.owner,
          at: storeNow,
          expires: kind === 'release' ? 0 : storeNow + this.o.ttlMs,
        }),
      ],
    };
  }

  /** The latest epoch (or `epoch`), its taker, whether it is free, and the store's clock. */
  private async read(
    epoch?: number,
  ): Promise<{ epoch: number; holder?: LeaseHolder; free: boolean; storeNow: number }> {
    const rows = await this.store.query<Row>(
      `SELECT epoch, kind, owner, toUnixTimestamp64Milli(at) AS at, toUnixTimestamp64Milli(expires) AS expires,
         toUnixTimestamp64Milli(now64(3)) AS now
       FROM automation_lease
       WHERE scope = {scope:String} AND epoch = ${epoch === undefined ? '(SELECT max(epoch) FROM automation_lease WHERE scope = {scope:String})' : '{epoch:UInt64}'}
       ORDER BY at`,
      { scope: this.o.scope, ...(epoch === undefined ? {} : { epoch }) },
    );
    if (rows.length === 0) {
      const [n] = await this.store.query<{ now: number }>('SELECT toUnixTimestamp64Milli(now64(3)) AS now');
      return { epoch: 0, free: true, storeNow: Number(n?.now ?? this.now()) };
    }
    const storeNow = Number(rows[0].now);
    const take = rows.find((r) => r.kind === 'take');
    const e = Number(rows[0].epoch);
    if (!take) return { epoch: e, free: true, storeNow };
    const mine = rows.filter((r) => r.owner === take.owner);
    const released = mine.some((r) => r.kind === 'release');
    const expires = released ? 0 : Math.max(...mine.map((r) => Number(r.expires)));
    return {
      epoch: e,
      holder: { epoch: e, owner: take.owner, expires },
      free: released || storeNow >= expires,
      storeNow,
    };
  }
}
