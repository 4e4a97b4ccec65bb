/**
 * The write-ahead log of `rankwatch up`: a Transport around the in-process bus that writes every
 * published batch to a disk journal (the collector's DiskSpool, fsynced) before it enters the
 * bus, and removes it from the journal only once the consumer (the pipeline) has acknowledged it,
 * i.e. stored it. So an ingest reply, which waits for publish, means "on disk": a crash of the
 * process (even SIGKILL) or of the machine loses nothing acknowledged. `recover()`, called at start
 * before any new work, puts what the last process left back on the bus, oldest first.
 *
 * The journal is a FIFO acknowledged from its head, so the inner bus must deliver batches one at
 * a time in publish order (a MemoryTransport with one partition, the default). Redelivery after a
 * crash is at least once: a batch stored just before the crash is stored again, and the store's
 * idempotent writes (ReplacingMergeTree, read with FINAL) keep one copy.
 */
import { RankwatchError } from '../core/errors.js';
import { DiskSpool } from './spool.js';
import type { Batch, Transport, TransportCounters } from './transport.js';

export interface WalOptions {
  /** Folder of the journal (created when missing). One process per folder. */
  dir: string;
  /** fdatasync each append before the publish resolves (default true: machine-crash safe). */
  fsync?: boolean;
}

export interface WalCounters {
  wal_logged_batches: number;
  wal_acked_batches: number;
  wal_recovered_batches: number;
  wal_recovered_events: number;
  wal_bytes: number;
}

export class WalTransport implements Transport {
  readonly type: string;
  private readonly log: DiskSpool;
  private readonly dir: string;
  /** Append then publish, one publish at a time: journal order is bus order. */
  private chain: Promise<unknown> = Promise.resolve();
  private readonly c = {
    wal_logged_batches: 0,
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
    // No size cap: a write-ahead log never drops what it acknowledged.
    this.log = new DiskSpool({ dir: opts.dir, maxBytes: Number.MAX_SAFE_INTEGER, fsync: opts.fsync ?? true });
  }

  /**
   * Puts the batches a previous process logged but never had acknowledged back on the bus, in
   * order, without logging them again. Call after `consume` and before taking new work; resolves
   * once all are queued (the bus's backpressure paces it).
   */
  async recover(): Promise<{ batches: number; events: number }> {
    const left = await this.log.read(Number.POSITIVE_INFINITY).catch((err: Error) => {
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `write-ahead log ${this.dir}: cannot use it (${err.message}); give --wal a writable folder`,
        { cause: err },
      );
    });
    const run = async () => {
      for (const b of left) {
        await this.inner.publish([b]);
        this.c.wal_recovered_batches++;
        this.c.wal_recovered_events += b.events.length;
      }
    };
    const p = this.chain.then(run, run);
    this.chain = p.catch(() => {});
    await p;
    return { batches: left.length, events: left.reduce((n, b) => n + b.events.length, 0) };
  }

  publish(batches: Batch[]): Promise<void> {
    const run = async () => {
      if (batches.length === 0) return;
      await this.log.append(batches);
      this.c.wal_logged_batches += batches.length;
      await this.inner.publish(batches);
    };
    const p = this.chain.then(run, run);
    this.chain = p.catch(() => {});
    return p;
  }

  consume(handler: Parameters<Transport['consume']>[0]): Promise<void> {
    return this.inner.consume(async (d) => {
      await handler(d);
      // The handler has stored the batch: it leaves the journal (deliveries come in publish order).
      await this.log.ack(1);
      this.c.wal_acked_batches++;
    });
  }

  drain(): Promise<void> {
    return this.inner.drain();
  }

  /** Stops the bus; the journal keeps what was not acknowledged for the next start. */
  stop(): Promise<void> {
    return this.inner.stop();
  }

  /** Closes the journal once nothing more will be acknowledged (after the pipeline stopped). */
  close(): Promise<void> {
    return this.log.close();
  }

  counters(): TransportCounters & WalCounters {
    return { ...this.inner.counters(), ...this.c, wal_bytes: this.log.bytes() };
  }
}
