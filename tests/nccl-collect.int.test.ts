/**
 * `rankwatch collect` (the built CLI, a subprocess) reading public nccl-tests output and a NCCL
 * watchdog log, into `rankwatch up` (in this process, 127.0.0.1, a free port): the findings a
 * user sees are the nccl-tests corruption on its host, the desync on the rank that diverged, and
 * the hang on the rank behind in its process group (judged once the timeouts settled: with nothing
 * more on the bus, on the pipeline's idle clock).
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Up } from '../api/up.js';
import { collectInto, upOnChdb } from './collect-into-up.js';
import { type Running, until } from './helpers.js';

const fixtures = join(import.meta.dirname, '..', 'collectors', 'parsers', 'fixtures');
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-nccl-'));

interface Row {
  type: string;
  state: string;
  host: string;
  rank: number | null;
  peer_host: string | null;
}

describe('rankwatch collect (nccl-tests, watchdog) → rankwatch up findings', () => {
  let up: Up;
  let collector: Running;

  beforeAll(async () => {
    up = await upOnChdb(dir);
    copyFileSync(join(fixtures, 'nccl-tests-wrong.txt'), join(dir, 'nccl-tests.log'));
    copyFileSync(join(fixtures, 'nccl-watchdog-desync-derived.log'), join(dir, 'train.log'));
    collector = collectInto(up, 'node-a', [
      '--nccl-tests',
      join(dir, 'nccl-tests.log'),
      '--nccl-log',
      join(dir, 'train.log'),
      '--job',
      'llm',
      '--from',
      'start',
      '--flush-ms',
      '200',
    ]);
  });

  afterAll(async () => {
    collector.kill();
    await up?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('stores the corruption, desync and hang findings with host and rank', async () => {
    const rows = await until(
      'the nccl findings',
      async () => {
        const r = await up.store.query<Row>(
          "SELECT type, state, host, rank, peer_host FROM findings WHERE state = 'open' ORDER BY type",
        );
        return r.length >= 3 ? r : undefined;
      },
      150_000,
    );
    expect(rows.map((r) => [r.type, r.host, r.rank])).toEqual([
      ['nccl_data_corruption', 'GENOA-01', null],
      ['nccl_desync', 'node-a', 2],
      ['nccl_hang', 'node-a', 3],
    ]);
    expect(await collector.stop()).toBe(0);
    expect(collector.stderr()).not.toMatch(/nccl_(tests|watchdog): line/);
    expect(up.pipeline.counters().dead_letters).toBe(0);
  }, 240_000);
});
