/**
 * Starts a real Alertmanager (deploy/alertmanager/alertmanager.sh) for the one test file that
 * calls it, on a free loopback port with its own state folder; `stop()` stops it and deletes the
 * state (KEEP_UP=1 leaves it running).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePortPair } from './ports.js';

const run = promisify(execFile);
export const ALERTMANAGER_SCRIPT = join(
  import.meta.dirname,
  '..',
  '..',
  'deploy',
  'alertmanager',
  'alertmanager.sh',
);

export async function startAlertmanager(
  resolveTimeout = '5m',
): Promise<{ url: string; stop(): Promise<void> }> {
  const state = mkdtempSync(join(tmpdir(), 'rankwatch-am-'));
  const env = {
    ...process.env,
    AM_PORT: String(await freePortPair(19093)),
    AM_STATE: state,
    AM_RESOLVE_TIMEOUT: resolveTimeout,
  };
  const { stdout } = await run('bash', [ALERTMANAGER_SCRIPT, 'start'], { env, timeout: 300_000 }).catch(
    (err) => {
      throw new Error(
        `could not start Alertmanager with ${ALERTMANAGER_SCRIPT}: ${(err as { stderr?: string }).stderr ?? err}`,
      );
    },
  );
  const url = stdout.trim().split('\n').at(-1) ?? '';
  return {
    url,
    async stop() {
      if (process.env.KEEP_UP === '1') return;
      await run('bash', [ALERTMANAGER_SCRIPT, 'stop'], { env, timeout: 60_000 });
      rmSync(state, { recursive: true, force: true });
    },
  };
}
