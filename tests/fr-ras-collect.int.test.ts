/**
 * `rankwatch collect --flight-recorder DIR --nccl-ras FILE` (the built CLI, a subprocess) into
 * `rankwatch up` (in this process, 127.0.0.1, a free port): the real Flight Recorder dumps of a
 * hang and a saved RAS report of a stopped process arrive as stored faults, none set aside.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Up } from '../api/up.js';
import { collectInto, upOnChdb } from './collect-into-up.js';
import { BIN, type Running, until } from './helpers.js';

const fixtures = join(import.meta.dirname, '..', 'collectors', 'parsers', 'fixtures');
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-fr-ras-'));

interface Row {
  source: string;
  code: string;
  host: string;
  rank: number;
  gpu: number;
  message: string;
}

describe('rankwatch collect (Flight Recorder, NCCL RAS) → rankwatch up', () => {
  let up: Up;
  let collector: Running;

  beforeAll(async () => {
    up = await upOnChdb(dir);
    const dumps = join(dir, 'fr');
    mkdirSync(dumps);
    for (const f of readdirSync(join(fixtures, 'flight-recorder', 'gloo-hang-4ranks')))
      copyFileSync(join(fixtures, 'flight-recorder', 'gloo-hang-4ranks', f), join(dumps, f));
    copyFileSync(join(fixtures, 'nccl-ras', 'docs-2.24-incomplete.txt'), join(dir, 'ras.txt'));
    collector = collectInto(up, 'node-a', [
      '--flight-recorder',
      dumps,
      '--nccl-ras',
      join(dir, 'ras.txt'),
      '--job',
      'llm',
      '--flush-ms',
      '200',
    ]);
  });

  afterAll(async () => {
    collector.kill();
    await up?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('stores the rank that never joined and the unresponsive and missing RAS ranks', async () => {
    const rows = await until('the faults', async () => {
      const r = await up.store.query<Row>(
        "SELECT source, code, host, rank, gpu, message FROM faults FINAL WHERE source IN ('flight_recorder', 'nccl_ras') ORDER BY source, code",
      );
      return r.length >= 3 ? r : undefined;
    });
    expect(rows.map((r) => [r.source, r.code, r.host, r.rank, r.gpu])).toEqual([
      ['flight_recorder', 'not_joined', 'node-a', 3, -1],
      ['nccl_ras', 'missing', 'node-a', -1, -1],
      ['nccl_ras', 'unresponsive', '172.16.64.213', -1, 5],
    ]);
    expect(rows[0].message).toMatch(
      /^rank 3 never joined gloo:all_reduce #5 of process group 0 \(default_pg\)/,
    );
    expect(await collector.stop()).toBe(0);
    expect(up.pipeline.counters().dead_letters).toBe(0);
  }, 180_000);

  it('--nccl-ras with something that is neither HOST:PORT nor a file is a usage error, exit 2', () => {
    const r = spawnSync(process.execPath, [BIN, 'collect', '--nccl-ras', 'node7:ras'], { encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(
      /RANKWATCH_ERR_USAGE: --nccl-ras needs HOST:PORT \(e\.g\. 127\.0\.0\.1:28028\) or a saved ncclras output file, got "node7:ras"/,
    );
  });
});
