/**
 * A publisher that never loses a batch to an outage: it publishes through `inner`, and when that
 * fails with a retriable error it appends the batches to a disk spool instead; a background loop
 * replays the spool, oldest first, once `inner` works again. While the spool holds anything, new
 * batches go behind it, so the bus sees them in the order they were published.
 * Delivery is at least once: a batch whose publish failed after the bus took it comes again.
 * An event the bus refuses on its own (TRANSPORT_REJECTED) is isolated and handed to `onRefused`,
 * so it neither costs its batch nor holds the spool forever.
 */
import { isRetriable, RankwatchError } from '../core/errors.js';
import { publishIsolating } from './isolate.js';
import type { DiskSpool } from './spool.js';
import type { Batch, Publisher } from './transport.js';

export interface SpoolingPublisherOptions {
  /** Batches handed to `inner` per replay step (default 64). */
  replayBatches?: number;
  /** First wait after a failed replay; doubles up to maxBackoffMs (defaults 200, 5000). */
  backoffMs?: number;
  maxBackoffMs?: number;
  /** Which failures mean "the bus is away" (default: RankwatchErrors marked retriable). */
  isRetriable?: (err: unknown) => boolean;
  /** Told about each failed replay attempt (for a log line or a counter). */
  onReplayError?: (err: unknown, attempt: number) => void;
  /** Told about each event the bus refused on its own, with its reason (it is not retried). */
  onRefused?: (event: unknown, reason: string) => void;
}

export interface SpoolingCounters {
  direct_batches: number;
  spooled_batches: number;
  replayed_batches: number;
  replay_errors: number;
  /** Events the bus refused on their own, set aside (onRefused). */
  refused_by_bus: number;
}

export class SpoolingPublisher implements Publisher {
  readonly type: string;
  private readonly o: Required<Omit<SpoolingPublisherOptions, 'onReplayError' | 'onRefused'>> &
    Pick<SpoolingPublisherOptions, 'onReplayError' | 'onRefused'>;
  /** Publishes run one after another: that is what keeps their order across an outage. */
  private chain: Promise<unknown> = Promise.resolve();
  private loop: Promise<void> | undefined;
  private stopped = false;
  private wakeLoop: (() => void) | undefined;
  private readonly c: SpoolingCounters = {
    direct_batches: 0,
    spooled_batches: 0,
    replayed_batches: 0,
    replay_errors: 0,
    refused_by_bus: 0,
  };
  private readonly refused = (event: unknown, reason: string) => {
    this.c.refused_by_bus++;
    this.o.onRefused?.(event, reason);
  };

  constructor(
    private readonly inner: Publisher,
    private readonly spool: DiskSpool,
    opts: SpoolingPublisherOptions = {},
  ) {
    this.type = `spooling(${inner.type})`;
    this.o = {
      replayBatches: opts.replayBatches ?? 64,
      backoffMs: opts.backoffMs ?? 200,
      maxBackoffMs: opts.maxBackoffMs ?? 5_000,
      isRetriable: opts.isRetriable ?? isRetriable,
      onReplayError: opts.onReplayError,
      onRefused: opts.onRefused,
    };
    // Opens the spool before the first publish, so a journal left by an earlier process is
    // known (and replayed first) before anything new can overtake it.
    this.chain = spool.ready().then(
      () => this.ensureLoop(),
      () => {},
    );
  }

  publish(batches: Batch[]): Promise<void> {
    return this.inOrder(batches, async () => {
      // Spooled bytes are acknowledged only once sent, so 0 means nothing older is waiting.
      if (this.spool.bytes() === 0) {
        try {
          await publishIsolating(this.inner, batches, this.refused);
          this.c.direct_batches += batches.length;
          return;
        } catch (err) {
          if (!this.o.isRetriable(err)) throw err;
        }
      }
      await this.toSpool(batches);
    });
  }

  /**
   * Puts batches straight on the disk spool, behind anything earlier; the replay loop sends them.
   * Resolves once they are on disk: what a local sender (a training hook) is acknowledged with.
   */
  enqueue(batches: Batch[]): Promise<void> {
    return this.inOrder(batches, () => this.toSpool(batches));
  }

  /** Runs `send` after everything published or enqueued before it; refused once stopped. */
  private inOrder(batches: Batch[], send: () => Promise<void>): Promise<void> {
    const run = async () => {
      if (this.stopped)
        throw new RankwatchError('RANKWATCH_ERR_STOPPED', 'publish on a stopped spooling publisher');
      if (batches.length > 0) await send();
    };
    const p = this.chain.then(run, run);
    this.chain = p.catch(() => {});
    return p;
  }

  private async toSpool(batches: Batch[]): Promise<void> {
    await this.spool.append(batches);
    this.c.spooled_batches += batches.length;
    this.ensureLoop();
  }

  /** Resolves when the spool is empty (everything handed to `inner`), or when stopped. */
  async flushed(): Promise<void> {
    await this.chain;
    while (this.loop && !this.stopped) await this.loop;
  }

  /** Batches waiting in the spool, in bytes. */
  spooledBytes(): number {
    return this.spool.bytes();
  }

  counters(): SpoolingCounters {
    return { ...this.c };
  }

  /** Idempotent: stops replaying (the spool keeps what is left for the next start), then `inner`. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    await this.chain;
    this.stopped = true;
    this.wakeLoop?.();
    await this.loop;
    await this.spool.close();
    await this.inner.stop();
  }

  private ensureLoop(): void {
    if (this.loop || this.stopped) return;
    this.loop = this.replay().finally(() => {
      this.loop = undefined;
    });
  }

  private async replay(): Promise<void> {
    let attempt = 0;
    while (!this.stopped) {
      try {
        const batches = await this.spool.read(this.o.replayBatches);
        if (batches.length === 0) return;
        await publishIsolating(this.inner, batches, this.refused);
        attempt = 0;
        // Delivered: a failure from here on only means they come again (at least once).
        await this.spool.ack(batches.length);
        this.c.replayed_batches += batches.length;
      } catch (err) {
        // The bus away, or the spool unreadable for now: wait and try again, never give up a batch.
        if (this.stopped) return;
        attempt++;
        this.c.replay_errors++;
        this.o.onReplayError?.(err, attempt);
        const delay = Math.min(this.o.maxBackoffMs, this.o.backoffMs * 2 ** Math.min(attempt - 1, 10));
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, delay);
          this.wakeLoop = () => {
            clearTimeout(t);
            resolve();
          };
        });
        this.wakeLoop = undefined;
      }
    }
  }
}
