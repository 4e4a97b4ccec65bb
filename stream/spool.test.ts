import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import { Disk } from '../soak/disk.js';
import { MemoryTransport } from './memory.js';
import { DiskSpool, type SpoolPosition } from './spool.js';
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

/** A segment file written by hand in the documented record format (stream/spool-records.ts). */
function record(key: string, eventLines: string[]): Buffer {
  const payload = Buffer.from([JSON.stringify({ key }), ...eventLines].join('\n'));
  return Buffer.concat([
    Buffer.from(`\x1e${crc32(payload).toString(16).padStart(8, '0')} ${payload.length} `),
    payload,
    Buffer.from('\n'),
  ]);
}
const eventLine = (i: number) => `{"v": 1, "kind": "step", "ts": ${i}, "job": "job-${i % 2}", "i": ${i}}`;
const rec = (i: number) => record(`job-${i % 2}`, [eventLine(i)]);
const segFile = (dir: string, seq: number, ext = 'rec') =>
  join(dir, `seg-${String(seq).padStart(12, '0')}.${ext}`);

describe('DiskSpool records: torn bytes cost only themselves', () => {
  it('reads the documented format, each event as the text it was written in', async () => {
    const dir = tempDir();
    writeFileSync(segFile(dir, 0), Buffer.concat([rec(1), rec(2)]));
    const s = new DiskSpool({ dir, maxBytes: 1 << 20 });
    const got = await s.read();
    expect(ids(got)).toEqual([1, 2]);
    expect(got[0]).toEqual({ key: 'job-1', events: [JSON.parse(eventLine(1))], lines: [eventLine(1)] });
    await s.close();
  });

  it('finds the next whole record after a torn prefix, a broken header, a bad checksum and stray bytes; acks agree with reads', async () => {
    const dir = tempDir();
    const three = rec(3);
    const badCrc = Buffer.from(rec(5));
    badCrc[badCrc.length - 3] ^= 1; // one bit of the payload flipped
    writeFileSync(
      segFile(dir, 0),
      Buffer.concat([
        rec(1),
        rec(2).subarray(0, 20), // a torn write: the start of a record, glued to the next one
        three,
        Buffer.from('\x1ezzzzzzzz 12 {"key":"x"}\n'), // not a header
        rec(4),
        badCrc,
        Buffer.from('garbage with no separator at all'),
        rec(6),
        rec(7).subarray(0, rec(7).length - 1), // the last one lacks its LF
      ]),
    );
    writeFileSync(segFile(dir, 1), Buffer.concat([Buffer.from('\x1e\x1e\x1e'), rec(8)]));
    const s = new DiskSpool({ dir, maxBytes: 1 << 20 });
    expect(ids(await s.read())).toEqual([1, 3, 4, 6, 8]);
    await s.ack(2);
    expect(ids(await s.read())).toEqual([4, 6, 8]);
    await s.close();
    // The acknowledged position survives a restart and falls on the same record.
    const again = new DiskSpool({ dir, maxBytes: 1 << 20 });
    expect(ids(await again.read())).toEqual([4, 6, 8]);
    await again.ack(3);
    expect(await again.read()).toEqual([]);
    expect(again.bytes()).toBe(0);
    expect(readdirSync(dir).filter((n) => n.startsWith('seg-'))).toEqual([]);
    await again.close();
  });

  it('reads and acknowledges what the JSON-lines version left, cursor included, and appends after it in a new file', async () => {
    const dir = tempDir();
    const line = (i: number) => `${JSON.stringify({ key: `job-${i % 2}`, events: [{ i }] })}\n`;
    writeFileSync(segFile(dir, 0, 'jsonl'), line(0) + line(1) + line(2));
    writeFileSync(segFile(dir, 1, 'jsonl'), `${line(3)}{"key":"job-0","ev`);
    // The old cursor: one line (its bytes) of segment 0 acknowledged.
    writeFileSync(join(dir, 'cursor.json'), JSON.stringify({ seq: 0, line: 1, bytes: line(0).length }));
    const s = new DiskSpool({ dir, maxBytes: 1 << 20 });
    expect(ids(await s.read())).toEqual([1, 2, 3]);
    await s.append([batch(4)]);
    expect(readdirSync(dir).filter((n) => n.endsWith('.rec'))).toHaveLength(1);
    expect(ids(await s.read())).toEqual([1, 2, 3, 4]);
    await s.ack(3);
    expect(ids(await s.read())).toEqual([4]);
    expect(readdirSync(dir).filter((n) => n.endsWith('.jsonl'))).toEqual([]);
    await s.close();
  });

  it('pages through a journal of any size from a position, a bounded chunk at a time, in order', async () => {
    const dir = tempDir();
    const s = new DiskSpool({ dir, maxBytes: 1 << 30, segmentBytes: 2000 });
    for (let i = 0; i < 100; i++) await s.append([batch(i, 5)]);
    await s.ack(10);
    const seen: number[] = [];
    let at: SpoolPosition | undefined;
    for (;;) {
      const chunk = await s.readFrom(at, { batches: 7, bytes: 1500 });
      if (chunk.batches.length === 0) break;
      expect(chunk.batches.length).toBeLessThanOrEqual(7);
      seen.push(...ids(chunk.batches));
      at = chunk.next;
    }
    expect(seen).toEqual(Array.from({ length: 90 }, (_, k) => k + 10));
    // Reading from a position acknowledges nothing.
    expect(ids(await s.read(1))).toEqual([10]);
    await s.close();
  });
});

/** A small real filesystem to fill (tmpfs; needs root to mount, as the tests run in CI). */
const diskRoot = mkdtempSync(join(tmpdir(), 'rankwatch-spool-disk-'));
const disk = new Disk(diskRoot, 'small');
const mounted = await disk.mount(1);
afterAll(async () => {
  await disk.unmount();
  rmSync(diskRoot, { recursive: true, force: true });
});

describe.skipIf(!mounted)('DiskSpool on a filling disk (a real 1 MiB tmpfs)', () => {
  const fat = (i: number) => batch(i, 600); // about 40 KiB a record
  const onDisk = (dir: string) =>
    readdirSync(dir)
      .filter((n) => n.startsWith('seg-'))
      .reduce((n, f) => n + statSync(join(dir, f)).size, 0);

  afterEach(() => disk.free());

  for (const fsync of [false, true]) {
    it(`a failed append leaves none of its bytes and rejects retriably; what was acknowledged reads back whole after space returns${fsync ? ' (fsync)' : ''}`, async () => {
      const dir = join(disk.dir, `spool-${fsync}`);
      const told: (string | undefined)[] = [];
      const s = new DiskSpool({ dir, maxBytes: 1 << 30, fsync, onAppend: (f) => told.push(f?.code) });
      await s.append([fat(0)]);
      disk.fill(0.05); // 50 KiB left: the next record fits, the one after only in part
      const acked = [0];
      let err: unknown;
      for (let i = 1; i < 10 && !err; i++) {
        const before = disk.freeBytes();
        try {
          await s.append([fat(i)]);
          acked.push(i);
        } catch (e) {
          err = e;
          // A short write: there was room for part of it.
          expect(before).toBeGreaterThan(0);
        }
      }
      expect(err).toMatchObject({ code: 'RANKWATCH_ERR_JOURNAL_WRITE', retriable: true });
      expect((err as Error).message).toMatch(/ENOSPC|no space/i);
      expect(told.at(-1)).toBe('RANKWATCH_ERR_JOURNAL_WRITE');
      // Cut back: the files hold exactly the records acknowledged.
      expect(onDisk(dir)).toBe(s.bytes());
      // A retry on the still-full disk fails the same way and leaves nothing either.
      await expect(s.append([fat(99)])).rejects.toMatchObject({ code: 'RANKWATCH_ERR_JOURNAL_WRITE' });
      expect(onDisk(dir)).toBe(s.bytes());
      disk.free();
      await s.append([fat(100)]);
      acked.push(100);
      expect(told.at(-1)).toBeUndefined();
      expect(ids(await s.read())).toEqual(acked);
      await s.close();
      const again = new DiskSpool({ dir, maxBytes: 1 << 30 });
      expect(ids(await again.read())).toEqual(acked);
      await again.ack(acked.length);
      expect(again.bytes()).toBe(0);
      await again.close();
    });
  }

  it('when the cut fails too (the file is append-only: truncate is refused), seals the segment and goes on in a new one', async () => {
    const dir = join(disk.dir, 'spool-sealed');
    const s = new DiskSpool({ dir, maxBytes: 1 << 30 });
    await s.append([fat(0)]);
    const [first] = readdirSync(dir).filter((n) => n.startsWith('seg-'));
    const whole = statSync(join(dir, first)).size;
    execFileSync('chattr', ['+a', join(dir, first)]);
    try {
      disk.fill(0.02);
      await expect(s.append([fat(1)])).rejects.toMatchObject({ code: 'RANKWATCH_ERR_JOURNAL_WRITE' });
      // The torn bytes stay where the cut failed; nothing is ever appended after them.
      expect(statSync(join(dir, first)).size).toBeGreaterThan(whole);
      disk.free();
      await s.append([fat(2)]);
      await s.append([fat(3)]);
      expect(readdirSync(dir).filter((n) => n.startsWith('seg-'))).toHaveLength(2);
      expect(ids(await s.read())).toEqual([0, 2, 3]);
      await s.close();
      const again = new DiskSpool({ dir, maxBytes: 1 << 30 });
      expect(ids(await again.read())).toEqual([0, 2, 3]);
      await again.ack(1);
      expect(ids(await again.read())).toEqual([2, 3]);
      await again.close();
    } finally {
      execFileSync('chattr', ['-a', join(dir, first)]);
      disk.free();
    }
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
