import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../core/log.js';
import { Disk } from '../soak/disk.js';
import { MemoryTransport } from './memory.js';
import { DiskSpool } from './spool.js';
import type { Batch } from './transport.js';
import { REPLAY_CHUNK, WalTransport } from './wal.js';

const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'rankwatch-wal-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const batch = (i: number, size = 4): Batch => ({
  key: 'job',
  events: Array.from({ length: size }, (_, k) => ({ v: 1, kind: 'step', ts: i, job: 'job', i, k })),
});
const idOf = (events: unknown[]) => (events[0] as { i: number }).i;

describe('WalTransport: replay at start', () => {
  it('replays a journal of many chunks in order while the pipeline stores and acknowledges behind it, and says how far it got', async () => {
    const dir = tempDir();
    const n = REPLAY_CHUNK.batches * 6 + 5;
    const old = new DiskSpool({ dir, maxBytes: Number.MAX_SAFE_INTEGER, segmentBytes: 4096 });
    for (let i = 0; i < n; i++) await old.append([batch(i)]);
    await old.close();
    expect(readdirSync(dir).filter((f) => f.startsWith('seg-')).length).toBeGreaterThan(20);

    const lines: string[] = [];
    const logger = createLogger('test', { write: (l) => lines.push(l), format: 'json' });
    // A small bus queue: replay runs ahead of the store only by a few batches, and acks remove
    // the segments it has read while it reads on.
    const wal = new WalTransport(new MemoryTransport({ maxQueuedBatches: 4, partitions: 1 }), {
      dir,
      logger,
      progressEveryMs: 0,
    });
    const stored: number[] = [];
    await wal.consume(async (d) => {
      stored.push(idOf(d.events));
    });
    expect(await wal.recover()).toEqual({ batches: n, events: n * 4 });
    await wal.drain();
    expect(stored).toEqual(Array.from({ length: n }, (_, i) => i));
    expect(wal.counters()).toMatchObject({ wal_recovered_batches: n, wal_acked_batches: n, wal_bytes: 0 });
    const said = lines.map((l) => JSON.parse(l) as { msg: string; replayed_events?: number });
    expect(said[0].msg).toMatch(/left by the last run, replaying it before taking ingest/);
    const progress = said.filter((l) => /replaying the write-ahead log/.test(l.msg));
    expect(progress.length).toBeGreaterThanOrEqual(6);
    expect(progress.at(-1)!.replayed_events).toBe(n * 4);
    await wal.stop();
    await wal.close();
    // Nothing left for the next start.
    const next = new DiskSpool({ dir, maxBytes: Number.MAX_SAFE_INTEGER });
    expect(await next.read()).toEqual([]);
    await next.close();
  });
});

const diskRoot = mkdtempSync(join(tmpdir(), 'rankwatch-wal-disk-'));
const disk = new Disk(diskRoot, 'small');
const mounted = await disk.mount(1);
afterAll(async () => {
  await disk.unmount();
  rmSync(diskRoot, { recursive: true, force: true });
});

describe.skipIf(!mounted)('WalTransport on a full disk (a real 1 MiB tmpfs)', () => {
  it('a publish whose journal write fails is refused retriably and reaches nobody; the next one after space returns does', async () => {
    const wal = new WalTransport(new MemoryTransport({ partitions: 1 }), { dir: join(disk.dir, 'wal') });
    const got: number[] = [];
    await wal.consume(async (d) => {
      got.push(idOf(d.events));
    });
    await wal.publish([batch(0, 500)]);
    disk.fill(0.01);
    try {
      await expect(wal.publish([batch(1, 2000)])).rejects.toMatchObject({
        code: 'RANKWATCH_ERR_JOURNAL_WRITE',
        retriable: true,
      });
    } finally {
      disk.free();
    }
    await wal.publish([batch(2, 500)]);
    await wal.drain();
    expect(got).toEqual([0, 2]);
    expect(wal.counters()).toMatchObject({ wal_logged_batches: 2, wal_acked_batches: 2, wal_bytes: 0 });
    await wal.stop();
    await wal.close();
  });
});
