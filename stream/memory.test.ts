import { describe, expect, it } from 'vitest';
import { MemoryTransport } from './memory.js';
import { batchByKey, keyOf, partitionOf } from './transport.js';
import { transportSuite } from './transport.suite.js';

transportSuite('memory', async () => new MemoryTransport({ partitions: 3, retryDelayMs: 5 }));

describe('memory transport', () => {
  it('makes producers wait while the consumer is behind (backpressure)', async () => {
    const t = new MemoryTransport({ maxQueuedBatches: 2 });
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    await t.consume(() => gate);
    let published = 0;
    const producer = (async () => {
      for (let i = 0; i < 5; i++) {
        await t.publish([{ key: 'j', events: [i] }]);
        published++;
      }
    })();
    await new Promise((r) => setTimeout(r, 50));
    expect(published).toBeLessThan(5);
    release();
    await producer;
    await t.drain();
    expect(t.counters().delivered_batches).toBe(5);
    await t.stop();
  });
});

describe('keys and partitions', () => {
  it('keys by job, then by host, and keeps a key on one partition', () => {
    expect(keyOf({ job: 'j1', host: 'h' })).toBe('j1');
    expect(keyOf({ host: 'gpu-0001' })).toBe('host:gpu-0001');
    expect(partitionOf('j1', 12)).toBe(partitionOf('j1', 12));
    const batches = batchByKey([{ job: 'a' }, { job: 'b' }, { job: 'a' }]);
    expect(batches.map((b) => [b.key, b.events.length])).toEqual([
      ['a', 2],
      ['b', 1],
    ]);
  });
});
