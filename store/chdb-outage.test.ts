/**
 * Store outages on the real engine: chDB's data folder on a small tmpfs that the test fills up
 * (chmod does not stop root, and tests run as root; a full filesystem is what makes chDB fail:
 * `Code: 243 ... not enough space (NOT_ENOUGH_SPACE)`). The batch must be held and retried, never
 * dead-lettered, and stored once when space comes back. Needs root (mount); skipped without it.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildPipeline } from '../pipeline/build.js';
import { ClusterSim } from '../sim/cluster.js';
import { MemoryTransport } from '../stream/memory.js';
import { batchByKey } from '../stream/transport.js';
import { ChdbStore } from './chdb.js';
import { tableCounts } from './queries.js';

const mnt = mkdtempSync(join(tmpdir(), 'rankwatch-full-'));
let mounted = false;
try {
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=48m', 'tmpfs', mnt], { stdio: 'ignore' });
  mounted = true;
} catch {
  // not root or no mount: the test below is skipped
}
const fill = join(mnt, 'fill');
const dataDir = join(mnt, 'data');
let store: ChdbStore | undefined;
afterAll(async () => {
  await store?.close();
  if (mounted) execFileSync('umount', ['-l', mnt]);
  rmSync(mnt, { recursive: true, force: true });
});

/** Fills the filesystem: dd stops with ENOSPC, which is the point. */
function fillDisk(): void {
  try {
    execFileSync('dd', ['if=/dev/zero', `of=${fill}`, 'bs=256k'], { stdio: 'ignore' });
  } catch {
    // "No space left on device": full
  }
}

const until = async (ok: () => boolean, ms = 30_000) => {
  const end = Date.now() + ms;
  while (!ok() && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
};

describe.skipIf(!mounted)('chdb on a full disk', () => {
  it('says the store is unavailable (retriable), not that it refuses the rows', async () => {
    mkdirSync(dataDir, { recursive: true });
    store = new ChdbStore({ path: dataDir });
    await store.migrate();
    fillDisk();
    const err = await store
      .insert([
        {
          table: 'dead_letters',
          rows: [JSON.stringify({ ts: Date.now(), source: 's', reason: 'r', raw: 'x' })],
        },
      ])
      .then(
        () => undefined,
        (e) => e,
      );
    rmSync(fill, { force: true });
    expect(err).toMatchObject({ code: 'RANKWATCH_ERR_STORE_UNAVAILABLE', retriable: true });
    expect(err.message).toMatch(/NOT_ENOUGH_SPACE/);
    // A row the engine cannot parse is a refusal of that row, on the same engine.
    await expect(store.insert([{ table: 'steps', rows: ['{"step":"not a number"}'] }])).rejects.toMatchObject(
      {
        code: 'RANKWATCH_ERR_STORE_REFUSED',
        retriable: false,
      },
    );
  });

  it('holds the batch while the disk is full, dead-letters nothing, and stores it once space is back', async () => {
    const s = store!;
    const events = [
      ...new ClusterSim({ ranks: 16, steps: 40, seed: 3, startTs: Date.now() - 600_000 }).events(),
    ];
    const transport = new MemoryTransport();
    const pipeline = buildPipeline({ transport, store: s });
    await pipeline.start();
    fillDisk();
    const publishing = transport.publish(batchByKey(events));
    await until(() => pipeline.counters().store_retries >= 3);
    const failing = pipeline.storeHealth();
    expect(failing.failingSince).toBeTypeOf('number');
    expect(failing.reason).toMatch(/NOT_ENOUGH_SPACE/);
    expect(pipeline.counters()).toMatchObject({ dead_letters: 0, events: 0 });
    rmSync(fill, { force: true }); // space is back
    await publishing;
    await pipeline.stop();
    const counts = await tableCounts(s);
    expect(counts.events).toBe(events.length);
    expect(counts.dead_letters).toBe(0);
    expect(pipeline.counters()).toMatchObject({ events: events.length, dead_letters: 0 });
    expect(pipeline.storeHealth().failingSince).toBeUndefined();
  });
});
