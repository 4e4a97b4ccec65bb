/**
 * `rankwatch up` in a terminal that closes (a window shut, an ssh session dropped): it drains what
 * it acknowledged into the store and ends, instead of failing on its first write to the dead
 * terminal (EIO) and then crashing in Node's exit (nodejs/node#51519: a core dump, exit by SIGSEGV
 * or SIGABRT). The terminal is a real pseudo-terminal, made by tests/terminal-hangup.py.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BIN, simLines } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-hangup-'));

describe('rankwatch up when its terminal closes', () => {
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('drains every acknowledged event into the store and ends without crashing', () => {
    const events = join(dir, 'job.jsonl');
    const lines = simLines('--ranks', '32', '--steps', '200', '--seed', '4', '--job', 'hangupjob');
    writeFileSync(events, `${lines.join('\n')}\n`);
    const data = join(dir, 'data');
    const stderr = join(dir, 'stderr');
    const run = JSON.parse(
      execFileSync(
        'python3',
        [
          join(import.meta.dirname, 'terminal-hangup.py'),
          events,
          stderr,
          process.execPath,
          BIN,
          'up',
          '--port',
          '0',
          '--data',
          data,
        ],
        { encoding: 'utf8', timeout: 600_000 },
      ),
    );
    const log = readFileSync(stderr, 'utf8');
    expect(run.ingest).toEqual({ accepted: lines.length, rejected: 0 });
    expect(log).toContain('SIGTERM: draining and closing');
    expect(log).not.toMatch(/EIO|unexpected|Assertion failed/);
    // It ends by SIGKILL once drained (Node 20 would abort restoring the gone terminal), not by a crash.
    expect(run.status).toBe(-9);
    const jobs = JSON.parse(
      execFileSync(process.execPath, [BIN, 'jobs', '--json', '--data', data], { encoding: 'utf8' }),
    );
    expect(jobs).toEqual([expect.objectContaining({ job: 'hangupjob', ranks: 32, last_step: 199 })]);
  }, 600_000);
});
