/**
 * Several transports as one: a job stage of the sharded layout reads its jobs' events and the
 * records its shards send (two topics, each its own consumer) through one pipeline. Publishing
 * goes to the first.
 */
import type { Batch, DeliveryHandler, Transport, TransportCounters } from './transport.js';
import { zeroCounters } from './transport.js';

export class MergedTransport implements Transport {
  readonly type: string;
  readonly name: string;
  /** The parts whose consume() succeeded. */
  private readonly consuming = new Set<Transport>();

  constructor(private readonly parts: readonly Transport[]) {
    this.type = parts[0].type;
    this.name = parts.map((p) => p.name ?? p.type).join(' + ');
  }

  publish(batches: Batch[]): Promise<void> {
    return this.parts[0].publish(batches);
  }

  /**
   * Starts every part not reading yet. One that fails (its broker or topic not there yet) leaves
   * the others reading, and the caller's next try starts it alone: a part asked twice would
   * refuse ("has a consumer already"), every try after that.
   */
  async consume(handler: DeliveryHandler): Promise<void> {
    const results = await Promise.allSettled(
      this.parts
        .filter((p) => !this.consuming.has(p))
        .map(async (p) => {
          await p.consume(handler);
          this.consuming.add(p);
        }),
    );
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  async drain(): Promise<void> {
    await Promise.all(this.parts.map((p) => p.drain()));
  }

  async stop(): Promise<void> {
    await Promise.all(this.parts.map((p) => p.stop()));
  }

  counters(): TransportCounters {
    const sum = zeroCounters();
    for (const p of this.parts)
      for (const [k, v] of Object.entries(p.counters()) as [keyof TransportCounters, number][])
        if (k in sum) sum[k] += v;
    return sum;
  }

  pause(): void {
    for (const p of this.parts) p.pause?.();
  }

  resume(): void {
    for (const p of this.parts) p.resume?.();
  }
}
