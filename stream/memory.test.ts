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
    // The first batch is in the (blocked) handler and still queued, the second waits behind it:
    // the queue is full at 2, so the third publish waits.
    expect(published).toBe(2);
    expect(t.counters()).toMatchObject({ published_batches: 2, delivered_batches: 0 });
    release();
    await producer;
    await t.drain();
    expect(t.counters().delivered_batches).toBe(5);
    await t.stop();
  });

  it('a publish waiting on a full queue rejects with RANKWATCH_ERR_STOPPED when the bus stops', async () => {
    const t = new MemoryTransport({ maxQueuedBatches: 1 });
    const seen: unknown[] = [];
    await t.consume(async (d) => {
      seen.push(...d.events);
      await new Promise(() => {}); // the consumer never acknowledges
    });
    await t.publish([{ key: 'j', events: [0] }]);
    const waiting = t.publish([{ key: 'j', events: [1] }]).then(
      () => 'resolved',
      (e: unknown) => e,
    );
    await new Promise((r) => setTimeout(r, 20));
    await t.stop();
    const err = await waiting;
    expect(err).toMatchObject({ code: 'RANKWATCH_ERR_STOPPED', retriable: false });
    expect(t.counters().published_batches).toBe(1);
    expect(seen).toEqual([0]);
  });

  it('a second consumer is refused', async () => {
    const t = new MemoryTransport();
    await t.consume(async () => {});
    await expect(t.consume(async () => {})).rejects.toMatchObject({ code: 'RANKWATCH_ERR_USAGE' });
    await t.stop();
  });
});

describe('keys and partitions', () => {
  it('keys by job, then by host, and keeps a key on one partition', () => {
    expect(keyOf({ job: 'j1', host: 'h' })).toBe('j1');
    expect(keyOf({ host: 'gpu-0001' })).toBe('host:gpu-0001');
    const batches = batchByKey([{ job: 'a' }, { job: 'b' }, { job: 'a' }]);
    expect(batches.map((b) => [b.key, b.events.length])).toEqual([
      ['a', 2],
      ['b', 1],
    ]);
  });

  it('maps keys into [0, partitions), stably, and spreads many keys over several partitions', () => {
    const keys = Array.from({ length: 200 }, (_, i) => `job-${i}`);
    for (const n of [1, 3, 12]) {
      const parts = keys.map((k) => partitionOf(k, n));
      for (const p of parts) {
        expect(Number.isInteger(p)).toBe(true);
        expect(p).toBeGreaterThanOrEqual(0);
        expect(p).toBeLessThan(n);
      }
      expect(new Set(parts).size).toBe(n); // 200 keys reach every partition
    }
    // FNV-1a is fixed: the same key lands on the same partition on every run and process.
    expect(partitionOf('', 12)).toBe(0x811c9dc5 % 12);
    expect(partitionOf('j1', 12)).toBe(partitionOf('j1', 12));
  });

  it('the memory bus delivers each key on the partition partitionOf names', async () => {
    const t = new MemoryTransport({ partitions: 4 });
    const seen = new Map<string, Set<number>>();
    await t.consume(async (d) => {
      if (!seen.has(d.key)) seen.set(d.key, new Set());
      seen.get(d.key)!.add(d.partition);
    });
    const keys = Array.from({ length: 40 }, (_, i) => `job-${i}`);
    for (let r = 0; r < 3; r++) await t.publish(keys.map((key) => ({ key, events: [r] })));
    await t.drain();
    expect([...seen.keys()].sort()).toEqual([...keys].sort());
    for (const [key, parts] of seen) expect([...parts]).toEqual([partitionOf(key, 4)]);
    expect(new Set([...seen.values()].map((s) => [...s][0])).size).toBeGreaterThan(1);
    await t.stop();
  });
});
