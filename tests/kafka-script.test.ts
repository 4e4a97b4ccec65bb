import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { KAFKA_SCRIPT } from './setup/kafka.js';

const run = promisify(execFile);

describe('deploy/kafka/kafka.sh', () => {
  // One base64 character in 64 is '-' after the URL-safe mapping; an id starting with it was read
  // by kafka-storage as an option and failed a CI run. 512 draws catch a regression ~99.97% of runs.
  it('draws cluster ids that are 22 URL-safe characters and never start with "-"', async () => {
    const { stdout } = await run('bash', [
      '-c',
      `for i in $(seq 512); do bash "${KAFKA_SCRIPT}" cluster-id; done`,
    ]);
    const ids = stdout.trim().split('\n');
    expect(ids).toHaveLength(512);
    for (const id of ids) expect(id).toMatch(/^[A-Za-z0-9_][A-Za-z0-9_-]{21}$/);
    expect(new Set(ids).size).toBe(512);
  });

  it('refuses to start on a port another process holds, naming the port and KAFKA_PORT', async () => {
    const server = createServer().listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as AddressInfo).port;
    const state = mkdtempSync(join(tmpdir(), 'rankwatch-kafka-state-'));
    try {
      await expect(
        run('bash', [KAFKA_SCRIPT, 'start'], {
          env: { ...process.env, KAFKA_PORT: String(port), KAFKA_STATE: state },
        }),
      ).rejects.toMatchObject({
        code: 1,
        stderr: expect.stringMatching(new RegExp(`127\\.0\\.0\\.1:${port} is taken.*KAFKA_PORT`, 's')),
      });
    } finally {
      server.close();
      rmSync(state, { recursive: true, force: true });
    }
  });

  it('rejects an unknown command with its usage', async () => {
    await expect(run('bash', [KAFKA_SCRIPT, 'nope'])).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('usage:'),
    });
  });
});
