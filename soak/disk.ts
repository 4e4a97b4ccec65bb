/**
 * A store folder on its own small filesystem, so the harness can fill it (ENOSPC) under a running
 * store, as a full disk does. (Remounting it read-only under open files is refused by the kernel.) Needs root (mount); where
 * mounting is not allowed the folder is a plain one and the disk faults are reported as not run.
 */
import { closeSync, mkdirSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Fault } from './feed.js';
import { sh, sleep } from './procs.js';

export class Disk {
  readonly dir: string;
  private mounted = false;
  private ballast: string;

  constructor(root: string, name: string) {
    this.dir = join(root, name);
    this.ballast = join(this.dir, '.ballast');
    mkdirSync(this.dir, { recursive: true });
  }

  /** Mounts a tmpfs of `mb` MiB at the folder; false when this machine does not allow it. */
  async mount(mb: number): Promise<boolean> {
    try {
      await sh(`mount -t tmpfs -o size=${mb}m rankwatch-soak '${this.dir}'`);
      this.mounted = true;
    } catch {
      this.mounted = false;
    }
    return this.mounted;
  }

  get canFail(): boolean {
    return this.mounted;
  }

  /** Fills the filesystem until writes fail with ENOSPC. */
  fill(): void {
    const fd = openSync(this.ballast, 'w');
    const chunk = Buffer.alloc(1 << 20, 1);
    try {
      for (;;) writeSync(fd, chunk);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
    } finally {
      closeSync(fd);
    }
  }

  free(): void {
    rmSync(this.ballast, { force: true });
  }

  /** The fault both paths inject: the disk full for `ms`, then space again. */
  fullFor(at: number, ms: number): Fault {
    return {
      at,
      name: `the store's disk full for ${ms / 1000} s (ENOSPC)`,
      run: async () => {
        this.fill();
        await sleep(ms);
        this.free();
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
