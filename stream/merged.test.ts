import { describe, expect, it } from 'vitest';
import { MemoryTransport } from './memory.js';
import { MergedTransport } from './merged.js';
import type { Delivery, DeliveryHandler } from './transport.js';

/** A bus whose first start fails (its broker not up yet), as the records topic's consumer may. */
class LateBus extends MemoryTransport {
  failures = 1;
  override async consume(handler: DeliveryHandler): Promise<void> {
    if (this.failures-- > 0) throw new Error('records topic: broker not reachable');
    return super.consume(handler);
  }
}

describe('one consumer of a job stage’s two topics', () => {
  it('starts again only the part that failed: the one already reading goes on, nothing read twice', async () => {
    const events = new MemoryTransport();
    const records = new LateBus();
    const merged = new MergedTransport([events, records]);
    const got: string[] = [];
    const handler = async (d: Delivery) => {
      got.push(`${d.key}:${(d.events as { n: number }[]).map((e) => e.n).join(',')}`);
    };
    await events.publish([{ key: 'job-a', events: [{ n: 1 }] }]);
    await records.publish([{ key: 'job-a', events: [{ n: 2 }] }]);
    await expect(merged.consume(handler)).rejects.toThrow('broker not reachable');
    // Retried as `detect` waits for the bus: it was "has a consumer already" for ever.
    await merged.consume(handler);
    await merged.drain();
    expect(got.sort()).toEqual(['job-a:1', 'job-a:2']);
    await merged.stop();
  });
});
