/**
 * A store folder on its own small filesystem, so the harness can fill it under a running store, as
 * a filling disk does. (Remounting it read-only under open files is refused by the kernel.) Needs
 * root (mount); where mounting is not allowed the folder is a plain one and the disk faults are
 * reported as not run.
 *
 * The disk fills to just under the store's free-space floor (chDB's 64 MiB by default), where the
 * engine refuses inserts before writing; that is what a disk that fills up meets first. Filling it to
 * the last byte under running writes makes chDB 26.7 write empty parts: store/chdb-outage.test.ts
 * shows that case and what the driver repairs.
 */
import {
  closeSync,
  mkdirSync,
  openSync,
  rmSync,
  statfsSync,
  statSync,
  truncateSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import type { Fault } from './feed.js';
import { printed, sh, sleep, untilMet } from './procs.js';

export class Disk {
  readonly dir: string;
  private mounted = false;
  private ballast: string;

  constructor(root: string, name: string) {
    this.dir = join(root, name);
    this.ballast = join(this.dir, '.ballast');
    mkdirSync(this.dir, { recursive: true });
  }

  /** Mounts a tmpfs of `mb` MiB (fractions allowed) at the folder; false when this machine does not allow it. */
  async mount(mb: number): Promise<boolean> {
    try {
      await sh(`mount -t tmpfs -o size=${Math.ceil(mb * 1024)}k rankwatch-soak '${this.dir}'`);
      this.mounted = true;
    } catch {
      this.mounted = false;
    }
    return this.mounted;
  }

  get canFail(): boolean {
    return this.mounted;
  }

  /** Free bytes on the filesystem. */
  freeBytes(): number {
    const s = statfsSync(this.dir);
    return s.bavail * s.bsize;
  }

  /** Fills the filesystem until `leaveMb` MiB (fractions allowed; 0: none) are free. */
  fill(leaveMb: number): void {
    const fd = openSync(this.ballast, 'a');
    const chunk = Buffer.alloc(1 << 20, 1);
    const free = () => this.freeBytes();
    try {
      const leave = Math.round(leaveMb * 2 ** 20);
      for (let left = free() - leave; left > 0; left = free() - leave)
        writeSync(fd, chunk, 0, Math.min(chunk.length, left));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
    } finally {
      closeSync(fd);
    }
  }

  free(): void {
    rmSync(this.ballast, { force: true });
  }

  /** Gives back `bytes` of the ballast (a little room on a full disk). */
  freeSome(bytes: number): void {
    const size = statSync(this.ballast).size;
    truncateSync(this.ballast, Math.max(0, size - bytes));
  }

  /**
   * The fault both paths inject: the disk full down to 16 MiB until a write has met it (`refusals`
   * counts the store's refusals so far, read from the processes' output; at most 30 s), then `ms`
   * more, then space again. A fault no write met says so in the report.
   */
  fullFor(at: number, ms: number, refusals: () => number): Fault {
    return {
      at,
      name: `the store's disk full (16 MiB left, under chDB's 64 MiB floor) until a write is refused, then ${ms / 1000} s more`,
      run: async () => {
        const met = untilMet(refusals);
        this.fill(16);
        const wasMet = await met;
        await sleep(ms);
        this.free();
        return wasMet ? undefined : 'no write met it';
      },
    };
  }

  async unmount(): Promise<void> {
    if (!this.mounted) return;
    this.free();
    await sh(`umount -l '${this.dir}'`).catch(() => {});
    this.mounted = false;
  }
}

/** How often the store refused a write for want of space, in what `procs` printed so far. */
export function spaceRefusals(procs: readonly { log(): string }[]): number {
  return printed(procs, /enough free space/);
}
