/**
 * The write-ahead log of `rankwatch up`: a Transport around the in-process bus that writes every
 * published batch to a disk journal (the collector's DiskSpool, fsynced) before it enters the
 * bus, and removes it from the journal only once the consumer (the pipeline) has acknowledged it,
 * i.e. stored it. So an ingest reply, which waits for publish, means "on disk": a crash of the
 * process (even SIGKILL) or of the machine loses nothing acknowledged. `recover()`, called at start
 * before any new work, puts what the last process left back on the bus, oldest first, reading the
 * journal a bounded chunk at a time (REPLAY_CHUNK), so a backlog of any size replays in bounded memory.
 *
 * A journal write that fails (a full disk) rejects the publishes it held with
 * RANKWATCH_ERR_JOURNAL_WRITE (retriable): none of their events went on, the journal was cut back
 * to its last whole record, and the sender retries them.
 *
 * The journal is a FIFO acknowledged from its head, so the inner bus must deliver batches one at
 * a time in publish order (a MemoryTransport with one partition, the default). Redelivery after a
 * crash is at least once: a batch stored just before the crash is stored again, and the store's
 * idempotent writes (ReplacingMergeTree, read with FINAL) keep one copy.
 */
import { RankwatchError } from '../core/errors.js';
import type { Logger } from '../core/log.js';
import { DiskSpool, type SpoolPosition } from './spool.js';
import type { Batch, Transport, TransportCounters } from './transport.js';

export interface WalOptions {
  /** Folder of the journal (created when missing). One process per folder. */
  dir: string;
  /** fdatasync each append before the publish resolves (default true: machine-crash safe). */
  fsync?: boolean;
  /** Where a long replay says how far it got (every `progressEveryMs`, default 10 s). */
  logger?: Logger;
  progressEveryMs?: number;
}

/**
 * What `recover()` holds in memory at once besides the bus's queue: one chunk of the journal
 * (this many batches, or this many bytes of records, whichever comes first) and one record.
 */
export const REPLAY_CHUNK = { batches: 64, bytes: 16 << 20 };

export interface WalCounters {
  wal_logged_batches: number;
  /** Journal writes, one fdatasync each; concurrent publishes share one (group commit). */
  wal_writes: number;
  wal_acked_batches: number;
  wal_recovered_batches: number;
  wal_recovered_events: number;
  wal_bytes: number;
}

export class WalTransport implements Transport {
  readonly type: string;
  private readonly log: DiskSpool;
  private readonly dir: string;
  private readonly logger: Logger | undefined;
  private readonly progressEveryMs: number;
  /** recover() in progress: publishes wait for it. */
  private chain: Promise<unknown> = Promise.resolve();
  /** Publishes waiting for the next journal write (group commit). */
  private pending: { batches: Batch[]; resolve: () => void; reject: (err: unknown) => void }[] = [];
  private writing = false;
  /** Batches stored but not yet acknowledged in the journal, and the cursor write under way. */
  private unacked = 0;
  private acking: Promise<void> | undefined;
  private readonly c = {
    wal_logged_batches: 0,
    wal_writes: 0,
    wal_acked_batches: 0,
    wal_recovered_batches: 0,
    wal_recovered_events: 0,
  };

  constructor(
    private readonly inner: Transport,
    opts: WalOptions,
  ) {
    this.type = `wal(${inner.type})`;
    this.dir = opts.dir;
    this.logger = opts.logger;
    this.progressEveryMs = opts.progressEveryMs ?? 10_000;
    // No size cap: a write-ahead log never drops what it acknowledged.
    this.log = new DiskSpool({ dir: opts.dir, maxBytes: Number.MAX_SAFE_INTEGER, fsync: opts.fsync ?? true });
  }

  /**
   * Puts the batches a previous process logged but never had acknowledged back on the bus, in
   * order, without logging them again. Call after `consume` and before taking new work; resolves
   * once all are queued (the bus's backpressure paces it, so the pipeline stores as it reads).
   */
  async recover(): Promise<{ batches: number; events: number }> {
    const run = async () => {
      const done = { batches: 0, events: 0 };
      const total = await this.unusable(() => this.log.ready().then(() => this.log.bytes()));
      if (total > 0)
        this.logger?.info(
          { total_bytes: total },
          `write-ahead log ${this.dir}: ${mib(total)} MiB left by the last run, replaying it before taking ingest`,
        );
      let said = Date.now();
      let moved = 0;
      let at: SpoolPosition | undefined;
      for (;;) {
        const chunk = await this.unusable(() => this.log.readFrom(at, REPLAY_CHUNK));
        if (chunk.batches.length === 0) break;
        for (const b of chunk.batches) {
          await this.inner.publish([b]);
          done.batches++;
          done.events += b.events.length;
          this.c.wal_recovered_batches++;
          this.c.wal_recovered_events += b.events.length;
        }
        at = chunk.next;
        moved += chunk.bytes;
        if (Date.now() - said >= this.progressEveryMs) {
          said = Date.now();
          this.logger?.info(
            { replayed_events: done.events, replayed_bytes: moved, total_bytes: total },
            `replaying the write-ahead log ${this.dir}: ${mib(moved)} of ${mib(total)} MiB, ${done.events} event(s) so far`,
          );
        }
      }
      return done;
    };
    const p = this.chain.then(run, run);
    this.chain = p.catch(() => {});
    return p;
  }

  /** A journal that cannot be read at start is a folder to fix, said so. */
  private unusable<T>(read: () => Promise<T>): Promise<T> {
    return read().catch((err: Error) => {
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `write-ahead log ${this.dir}: cannot use it (${err.message}); give --wal a writable folder`,
        { cause: err },
      );
    });
  }

  /**
   * Group commit: publishes that arrive while the log is being written wait and go to disk
   * together in the next write, so concurrent requests share one fdatasync instead of queueing
   * for one each. Each resolves once its batches are on disk and on the bus, in arrival order.
   */
  publish(batches: Batch[]): Promise<void> {
    if (batches.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.pending.push({ batches, resolve, reject });
      if (!this.writing) void this.commit();
    });
  }

  private async commit(): Promise<void> {
    this.writing = true;
    while (this.pending.length > 0) {
      // recover() goes first: what the last process left is older than anything published now.
      await this.chain;
      const group = this.pending.splice(0);
      try {
        await this.log.append(group.flatMap((p) => p.batches));
        this.c.wal_writes++;
      } catch (err) {
        for (const p of group) p.reject(err);
        continue;
      }
      for (const p of group) {
        this.c.wal_logged_batches += p.batches.length;
        // Journal order is bus order: each waits for the bus (its backpressure) in turn.
        await this.inner.publish(p.batches).then(p.resolve, p.reject);
      }
    }
    this.writing = false;
  }

  consume(handler: Parameters<Transport['consume']>[0]): Promise<void> {
    return this.inner.consume(async (d) => {
      await handler(d);
      // The handler has stored the batch: it leaves the journal (deliveries come in publish order).
      this.unacked++;
      this.acking ??= this.ackStored();
    });
  }

  /**
   * Acknowledges stored batches in the journal, those that finished while the last cursor write
   * ran in one write, so cursor writes do not queue between log appends one per batch. A cursor
   * write that fails (or one lost in a crash) only means those batches are replayed and stored
   * again at the next start, where the store keeps one copy.
   */
  private async ackStored(): Promise<void> {
    while (this.unacked > 0) {
      const n = this.unacked;
      this.unacked = 0;
      try {
        await this.log.ack(n);
        this.c.wal_acked_batches += n;
      } catch {
        break; // stopped or unwritable: the next start replays them
      }
    }
    // Cleared with no await after the loop's last check, so no acknowledgement is left waiting.
    this.acking = undefined;
  }

  async drain(): Promise<void> {
    await this.inner.drain();
    await this.acking;
  }

  /** Stops the bus; the journal keeps what was not acknowledged for the next start. */
  stop(): Promise<void> {
    return this.inner.stop();
  }

  /** Closes the journal once nothing more will be acknowledged (after the pipeline stopped). */
  async close(): Promise<void> {
    await this.acking;
    return this.log.close();
  }

  counters(): TransportCounters & WalCounters {
    return { ...this.inner.counters(), ...this.c, wal_bytes: this.log.bytes() };
  }
}

const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(1);
