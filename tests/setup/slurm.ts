/**
 * Starts a real one-machine Slurm cluster (deploy/slurm/slurm.sh) for the test file that calls it,
 * on free loopback ports with its own state folder; `stop()` stops the daemons and deletes it
 * (KEEP_UP=1 leaves them running). Needs root (slurmd).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePortPair } from './ports.js';

const run = promisify(execFile);
export const SLURM_SCRIPT = join(import.meta.dirname, '..', '..', 'deploy', 'slurm', 'slurm.sh');

export async function startSlurm(nodes: string[]): Promise<{ conf: string; stop(): Promise<void> }> {
  const state = mkdtempSync(join(tmpdir(), 'rankwatch-slurm-'));
  // slurmctld takes PORT, each slurmd a port after it (checked free: PORT and PORT+1).
  const port = await freePortPair(16817);
  const env = { ...process.env, SLURM_PORT: String(port), SLURM_STATE: state, SLURM_NODES: nodes.join(' ') };
  const { stdout } = await run('bash', [SLURM_SCRIPT, 'start'], { env, timeout: 300_000 }).catch((err) => {
    throw new Error(
      `could not start Slurm with ${SLURM_SCRIPT}: ${(err as { stderr?: string }).stderr ?? err}`,
    );
  });
  return {
    conf: stdout.trim().split('\n').at(-1) ?? '',
    async stop() {
      if (process.env.KEEP_UP === '1') return;
      await run('bash', [SLURM_SCRIPT, 'stop'], { env, timeout: 60_000 });
      rmSync(state, { recursive: true, force: true });
    },
  };
}
