/**
 * The in-process bus: a bounded queue per partition, one delivery loop per partition. A handler
 * that rejects gets the same batch again after a backoff (at least once); publish waits while a
 * partition holds `maxQueuedBatches` (or `maxQueuedEvents`), which carries the consumer's
 * backpressure to producers.
 */
import { RankwatchError } from '../core/errors.js';
import {
  type Batch,
  type Delivery,
  type DeliveryHandler,
  partitionOf,
  type Transport,
  type TransportCounters,
  zeroCounters,
} from './transport.js';

export interface MemoryTransportConfig {
  partitions?: number;
  maxQueuedBatches?: number;
  /**
   * Events a partition may hold (default: no bound but the batches'); a batch waits while it would
   * pass it, unless the partition is empty, so a batch larger than the bound still goes through.
   */
  maxQueuedEvents?: number;
  /** Delay before redelivering a batch whose handler failed. */
  retryDelayMs?: number;
}

interface Partition {
  queue: Delivery[];
  /** Events in `queue`. */
  events: number;
  nextOffset: number;
  running: boolean;
}

export class MemoryTransport implements Transport {
  readonly type = 'memory';
  private readonly parts: Partition[];
  private readonly maxQueued: number;
  private readonly maxQueuedEvents: number;
  private readonly retryDelayMs: number;
  private handler: DeliveryHandler | undefined;
  private stopped = false;
  private waiters: (() => void)[] = [];
  private readonly c: TransportCounters = zeroCounters();

  constructor(config: MemoryTransportConfig = {}) {
    this.parts = Array.from({ length: config.partitions ?? 1 }, () => ({
      queue: [],
      events: 0,
      nextOffset: 0,
      running: false,
    }));
    this.maxQueued = config.maxQueuedBatches ?? 64;
    this.maxQueuedEvents = config.maxQueuedEvents ?? Number.POSITIVE_INFINITY;
    this.retryDelayMs = config.retryDelayMs ?? 50;
  }

  async publish(batches: Batch[]): Promise<void> {
    for (const b of batches) {
      const index = partitionOf(b.key, this.parts.length);
      const part = this.parts[index];
      while (!this.stopped && this.full(part, b.events.length)) await this.waitForProgress();
      // Checked after any wait for room: a batch queued on a stopped bus is never delivered.
      if (this.stopped)
        throw new RankwatchError('RANKWATCH_ERR_STOPPED', 'publish on a stopped memory transport');
      const d: Delivery = { key: b.key, partition: index, offset: part.nextOffset++, events: b.events };
      if (b.lines) d.lines = b.lines;
      if (b.undecodable?.length) d.undecodable = b.undecodable;
      part.queue.push(d);
      part.events += d.events.length;
      this.c.published_batches++;
      this.c.published_events += b.events.length;
      this.pump(part);
    }
  }

  async consume(handler: DeliveryHandler): Promise<void> {
    if (this.handler)
      throw new RankwatchError('RANKWATCH_ERR_USAGE', 'memory transport has a consumer already');
    this.handler = handler;
    for (const p of this.parts) this.pump(p);
  }

  async drain(): Promise<void> {
    while (!this.stopped && this.parts.some((p) => p.queue.length > 0)) await this.waitForProgress();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake();
  }

  counters(): TransportCounters {
    return { ...this.c };
  }

  private pump(part: Partition): void {
    if (part.running || !this.handler || part.queue.length === 0 || this.stopped) return;
    part.running = true;
    void this.deliverLoop(part);
  }

  private async deliverLoop(part: Partition): Promise<void> {
    const handler = this.handler!;
    let attempt = 0;
    while (part.queue.length > 0 && !this.stopped) {
      const d = part.queue[0];
      try {
        await handler(d);
        part.queue.shift();
        part.events -= d.events.length;
        this.c.delivered_batches++;
        attempt = 0;
        this.wake();
      } catch {
        this.c.handler_errors++;
        this.c.redelivered_batches++;
        attempt++;
        await new Promise((r) =>
          setTimeout(r, Math.min(5_000, this.retryDelayMs * 2 ** Math.min(attempt, 7))),
        );
      }
    }
    part.running = false;
    this.wake();
  }

  private full(part: Partition, adding: number): boolean {
    if (part.queue.length >= this.maxQueued) return true;
    return part.queue.length > 0 && part.events + adding > this.maxQueuedEvents;
  }

  private waitForProgress(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const fn of w) fn();
  }
}
