import { appendFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import { MemoryTransport } from './memory.js';
import { DiskSpool } from './spool.js';
import { SpoolingPublisher } from './spool-publisher.js';
import type { Batch, Publisher } from './transport.js';

const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'rankwatch-spool-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const batch = (i: number, size = 3): Batch => ({
  key: `job-${i % 2}`,
  events: Array.from({ length: size }, (_, k) => ({ v: 1, kind: 'step', ts: i, job: `job-${i % 2}`, i, k })),
});
const ids = (bs: Batch[]) => bs.map((b) => (b.events[0] as { i: number }).i);

async function waitFor(check: () => boolean, ms = 20_000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('DiskSpool', () => {
  it('reads oldest first, acks from the head, across segments', async () => {
    const s = new DiskSpool({ dir: tempDir(), maxBytes: 1 << 20, segmentBytes: 400 });
    for (let i = 0; i < 20; i++) await s.append([batch(i)]);
    expect(ids(await s.read(5))).toEqual([0, 1, 2, 3, 4]);
    await s.ack(3);
    expect(ids(await s.read(4))).toEqual([3, 4, 5, 6]);
    await s.ack(10);
    expect(ids(await s.read())).toEqual([13, 14, 15, 16, 17, 18, 19]);
    await s.ack(7);
    expect(await s.read()).toEqual([]);
    expect(s.bytes()).toBe(0);
    await s.close();
  });

  it('survives a restart: a new spool on the folder resumes at the acknowledged position', async () => {
    const dir = tempDir();
    const a = new DiskSpool({ dir, maxBytes: 1 << 20, segmentBytes: 300 });
    for (let i = 0; i < 10; i++) await a.append([batch(i)]);
    await a.ack(4);
    await a.close();
    const b = new DiskSpool({ dir, maxBytes: 1 << 20, segmentBytes: 300 });
    expect(ids(await b.read(100))).toEqual([4, 5, 6, 7, 8, 9]);
    expect(b.bytes()).toBeGreaterThan(0);
    await b.append([batch(10)]);
    expect(ids(await b.read(100)).at(-1)).toBe(10);
    await b.close();
  });

  it('drops whole oldest segments past the cap and says how much', async () => {
    const dropped: number[] = [];
    const s = new DiskSpool({
      dir: tempDir(),
      maxBytes: 2000,
      segmentBytes: 500,
      onDropOldest: (n) => dropped.push(n),
    });
    for (let i = 0; i < 40; i++) await s.append([batch(i)]);
    expect(dropped.length).toBeGreaterThan(0);
    expect(s.bytes()).toBeLessThanOrEqual(2000);
    const left = ids(await s.read(1000));
    expect(left.at(-1)).toBe(39);
    expect(left[0]).toBeGreaterThan(0);
    // What is left is contiguous: only the oldest went.
    expect(left).toEqual(Array.from({ length: left.length }, (_, k) => left[0] + k));
    await s.close();
  });

  it('skips a torn last line left by a crash', async () => {
    const dir = tempDir();
    const a = new DiskSpool({ dir, maxBytes: 1 << 20 });
    await a.append([batch(1), batch(2)]);
    await a.close();
    const seg = readdirSync(dir).find((n) => n.startsWith('seg-'))!;
    appendFileSync(join(dir, seg), '{"key":"job-1","events":[{"v":1');
    const b = new DiskSpool({ dir, maxBytes: 1 << 20 });
    expect(ids(await b.read())).toEqual([1, 2]);
    await b.ack(2);
    expect(b.bytes()).toBe(0);
    await b.close();
  });

  it('never appends after a torn line: what a restarted process appends is read back whole', async () => {
    const dir = tempDir();
    const a = new DiskSpool({ dir, maxBytes: 1 << 20 });
    await a.append([batch(1)]);
    await a.close();
    const seg = readdirSync(dir).find((n) => n.startsWith('seg-'))!;
    appendFileSync(join(dir, seg), '{"key":"job-1","events":[{"v":1');
    const b = new DiskSpool({ dir, maxBytes: 1 << 20, fsync: true });
    await b.append([batch(2)]);
    await b.append([batch(3)]);
    expect(ids(await b.read())).toEqual([1, 2, 3]);
    await b.close();
  });

  it('after close, append, read and ack reject with RANKWATCH_ERR_STOPPED and the journal is kept', async () => {
    const dir = tempDir();
    const s = new DiskSpool({ dir, maxBytes: 1 << 20 });
    await s.append([batch(1)]);
    // close waits for an append already queued before it.
    const pending = s.append([batch(2)]);
    await s.close();
    await pending;
    for (const op of [() => s.append([batch(3)]), () => s.read(), () => s.ack(1)]) {
      const err = await op().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(RankwatchError);
      expect(err).toMatchObject({ code: 'RANKWATCH_ERR_STOPPED', retriable: false });
    }
    await expect(s.close()).resolves.toBeUndefined();
    const again = new DiskSpool({ dir, maxBytes: 1 << 20 });
    expect(ids(await again.read())).toEqual([1, 2]);
    await again.close();
  });
});

/** The in-process bus with an off switch: down, it fails the way an unreachable broker does. */
class Switchable implements Publisher {
  readonly type = 'switchable';
  down = false;
  calls = 0;
  constructor(readonly bus: MemoryTransport) {}
  /** Events it refuses on their own, down or not (as Kafka refuses an oversized one before sending). */
  refuse: (event: unknown) => boolean = () => false;
  async publish(batches: Batch[]): Promise<void> {
    this.calls++;
    if (batches.some((b) => b.events.some(this.refuse)))
      throw new RankwatchError('RANKWATCH_ERR_TRANSPORT_REJECTED', 'too large');
    if (this.down) throw new RankwatchError('RANKWATCH_ERR_TRANSPORT_UNAVAILABLE', 'bus is down');
    await this.bus.publish(batches);
  }
  async stop(): Promise<void> {
    await this.bus.stop();
  }
}

describe('SpoolingPublisher', () => {
  it('spools during an outage, replays in order when the bus is back, and counts it all', async () => {
    const bus = new MemoryTransport({ maxQueuedBatches: 1000 });
    const got: number[] = [];
    await bus.consume(async (d) => {
      got.push((d.events[0] as { i: number }).i);
    });
    const inner = new Switchable(bus);
    const spool = new DiskSpool({ dir: tempDir(), maxBytes: 1 << 20 });
    const p = new SpoolingPublisher(inner, spool, { backoffMs: 20, maxBackoffMs: 50 });
    for (let i = 0; i < 5; i++) await p.publish([batch(i)]);
    inner.down = true;
    for (let i = 5; i < 15; i++) await p.publish([batch(i)]);
    expect(p.spooledBytes()).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 100));
    inner.down = false;
    // Published while the spool drains: must queue behind it.
    for (let i = 15; i < 20; i++) await p.publish([batch(i)]);
    await p.flushed();
    await waitFor(() => got.length >= 20);
    expect(got).toEqual(Array.from({ length: 20 }, (_, i) => i));
    const c = p.counters();
    expect(c.spooled_batches).toBeGreaterThanOrEqual(10);
    expect(c.replay_errors).toBeGreaterThan(0);
    expect(c.direct_batches + c.replayed_batches).toBe(20);
    await p.stop();
  });

  it('stop is idempotent (also when called twice at once); publish afterwards rejects with STOPPED', async () => {
    const bus = new MemoryTransport();
    await bus.consume(async () => {});
    const inner = new Switchable(bus);
    const p = new SpoolingPublisher(inner, new DiskSpool({ dir: tempDir(), maxBytes: 1 << 20 }));
    await p.publish([batch(1)]);
    await expect(Promise.all([p.stop(), p.stop()])).resolves.toEqual([undefined, undefined]);
    await expect(p.stop()).resolves.toBeUndefined();
    const calls = inner.calls;
    const err = await p.publish([batch(2)]).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RankwatchError);
    expect(err).toMatchObject({ code: 'RANKWATCH_ERR_STOPPED', retriable: false });
    // Neither sent nor spooled.
    expect(inner.calls).toBe(calls);
    expect(p.counters()).toMatchObject({ direct_batches: 1, spooled_batches: 0 });
  });

  it('stop keeps what is still spooled for the next process', async () => {
    const dir = tempDir();
    const bus = new MemoryTransport();
    await bus.consume(async () => {});
    const inner = new Switchable(bus);
    inner.down = true;
    const p = new SpoolingPublisher(inner, new DiskSpool({ dir, maxBytes: 1 << 20 }), {
      backoffMs: 10_000,
      maxBackoffMs: 10_000,
    });
    await p.publish([batch(1), batch(2)]);
    expect(p.spooledBytes()).toBeGreaterThan(0);
    const started = Date.now();
    await p.stop(); // wakes the replay loop out of its 10 s backoff
    expect(Date.now() - started).toBeLessThan(5_000);
    await expect(p.publish([batch(3)])).rejects.toMatchObject({ code: 'RANKWATCH_ERR_STOPPED' });
    const next = new DiskSpool({ dir, maxBytes: 1 << 20 });
    expect(ids(await next.read())).toEqual([1, 2]);
    await next.close();
  });

  it('replays what an earlier process left in the spool', async () => {
    const dir = tempDir();
    const old = new DiskSpool({ dir, maxBytes: 1 << 20 });
    await old.append([batch(1), batch(2)]);
    await old.close();
    const bus = new MemoryTransport();
    const got: number[] = [];
    await bus.consume(async (d) => {
      got.push((d.events[0] as { i: number }).i);
    });
    const p = new SpoolingPublisher(new Switchable(bus), new DiskSpool({ dir, maxBytes: 1 << 20 }));
    await p.publish([batch(3)]);
    await p.flushed();
    await waitFor(() => got.length >= 3);
    expect(got).toEqual([1, 2, 3]);
    await p.stop();
  });

  it('counts an event the bus refuses once, also when an outage cut short the publish it was refused in', async () => {
    // Seen in the Kafka soak: the refused half of a batch was told, the other half met the broker
    // stop, the whole batch was spooled, and its replay refused (and told) the event again.
    const bus = new MemoryTransport();
    const got: number[] = [];
    await bus.consume(async (d) => {
      for (const e of d.events) got.push((e as { k: number }).k);
    });
    const inner = new Switchable(bus);
    inner.refuse = (e) => (e as { k: number }).k === 0;
    inner.down = true;
    const told: unknown[] = [];
    const p = new SpoolingPublisher(inner, new DiskSpool({ dir: tempDir(), maxBytes: 1 << 20 }), {
      backoffMs: 20,
      maxBackoffMs: 50,
      onRefused: (e) => told.push(e),
    });
    await p.publish([batch(1, 4)]);
    expect(p.spooledBytes()).toBeGreaterThan(0);
    expect(told).toEqual([]);
    inner.down = false;
    await p.flushed();
    await waitFor(() => got.length >= 3);
    expect(got.sort()).toEqual([1, 2, 3]);
    expect(told).toEqual([batch(1, 4).events[0]]);
    expect(p.counters().refused_by_bus).toBe(1);
    await p.stop();
  });

  it('passes errors that are not outages to the caller', async () => {
    const inner: Publisher = {
      type: 'broken',
      publish: async () => {
        throw new RankwatchError('RANKWATCH_ERR_INPUT', 'bad batch');
      },
      stop: async () => {},
    };
    const p = new SpoolingPublisher(inner, new DiskSpool({ dir: tempDir(), maxBytes: 1 << 20 }));
    await expect(p.publish([batch(1)])).rejects.toThrow('bad batch');
    expect(p.spooledBytes()).toBe(0);
    await p.stop();
  });
});
