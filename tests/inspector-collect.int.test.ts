/**
 * `rankwatch collect --nccl-inspector DIR` (the built CLI, a subprocess) as a node runs it: the
 * training hooks post their step events (with their pids) to the collector's local ingest, the
 * NCCL Inspector plugin writes one dump file per process in DIR, and `rankwatch up` (this
 * process, chDB) stores one collective event per rank, step, communicator and op. A process no
 * step event names and whose environment cannot be read is counted, never given a rank.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Up } from '../api/up.js';
import { inspectorLine } from '../collectors/parsers/nccl_inspector_format.js';
import { collectInto, upOnChdb } from './collect-into-up.js';
import { BIN, postLines, type Running, until } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-inspector-collect-'));
const dumps = join(dir, 'nccl-inspector-81723');
const running: Running[] = [];
let up: Up | undefined;
afterAll(async () => {
  for (const r of running) r.kill();
  await up?.close();
  rmSync(dir, { recursive: true, force: true });
});

const HOST = 'gpu-node-07';
const T0 = Date.now() - 600_000;
/** No process has this pid (above any pid_max): its environment cannot be read. */
const GHOST = 2_147_483_000;
/** Per rank and step: the all-reduce buckets' execution times (µs) Inspector reports. */
const EXEC: number[][][] = [
  [
    [2210, 2236, 2190],
    [2201, 9120, 2244],
    [2215, 2230, 2199],
  ],
  [
    [2180, 2311, 2205],
    [2193, 9100, 2240],
    [2207, 2222, 2231],
  ],
];
const BYTES = 1 << 28;

const stepEvent = (rank: number, step: number) =>
  JSON.stringify({
    v: 1,
    kind: 'step',
    ts: T0 + 1000 * (step + 1),
    job: 'pretrain',
    rank,
    host: HOST,
    gpu: rank,
    pid: 20870 + rank,
    step,
    step_ms: 1000,
    compute_ms: 700,
    comm_wait_ms: 300,
  });

function dumpFile(rank: number, pid: number): string {
  let out = '';
  let seq = 40;
  for (let s = 0; s < 3; s++)
    EXEC[rank][s].forEach((execUs, k) => {
      out += `${inspectorLine({
        comm: '0x9b4e2c6d11f0a7',
        commName: 'DP Group 0',
        commRank: rank,
        nranks: 2,
        nnodes: 1,
        hostname: HOST,
        pid,
        dumpUs: (T0 + 1000 * s + 200 + 250 * k) * 1000,
        func: 'AllReduce',
        seq: ++seq,
        bytes: BYTES,
        execUs,
        algobwGbs: BYTES / execUs / 1e3,
        busbwGbs: BYTES / execUs / 1e3,
      })}\n`;
    });
  return out;
}

describe('rankwatch collect --nccl-inspector → rankwatch up', () => {
  it('stores one reduced collective per rank, step and communicator, and counts the unmappable pid', async () => {
    up = await upOnChdb(dir);
    const c = collectInto(
      up,
      HOST,
      ['--health-port', '0', '--flush-ms', '200', '--nccl-inspector', dumps, '--from', 'start'],
      { ...process.env, RANKWATCH_LOG_FORMAT: 'json' },
    );
    running.push(c);
    const local = await until(
      'the health port',
      () => /health on (http:\/\/\S+)\/healthz/.exec(c.stderr())?.[1],
    );
    // The hooks' steps come first (as they do: a step ends before Inspector dumps the next).
    expect(
      await postLines(
        local,
        [0, 1, 2].flatMap((s) => [stepEvent(0, s), stepEvent(1, s)]),
      ),
    ).toEqual([200]);
    // The folder the plugin creates, and its files.
    await import('node:fs/promises').then((fs) => fs.mkdir(dumps));
    writeFileSync(join(dumps, `${HOST}-pid20870.log`), dumpFile(0, 20870));
    writeFileSync(join(dumps, `${HOST}-pid20871.log`), dumpFile(1, 20871));
    writeFileSync(join(dumps, `${HOST}-pid${GHOST}.log`), dumpFile(0, GHOST));

    const rows = await until('six collective events in up', async () => {
      const r = await up!.store.query<{ raw: string }>("SELECT raw FROM events WHERE kind = 'collective'");
      return r.length >= 6 ? r.map((x) => JSON.parse(x.raw)) : undefined;
    });
    expect(await c.stop()).toBe(0);
    rows.sort((a, b) => a.step - b.step || a.rank - b.rank);
    const expected = [0, 1, 2].flatMap((s) =>
      [0, 1].map((rank) => {
        const ex = EXEC[rank][s];
        return {
          job: 'pretrain',
          rank,
          host: HOST,
          gpu: rank,
          step: s,
          op: 'allreduce',
          comm: '0x9b4e2c6d11f0a7',
          comm_name: 'DP Group 0',
          nranks: 2,
          count: 3,
          bytes: 3 * BYTES,
          dur_ms: ex.reduce((a, b) => a + b, 0) / 1000,
          max_ms: Math.max(...ex) / 1000,
          seq: 40 + 3 * (s + 1),
        };
      }),
    );
    expect(rows).toHaveLength(6);
    expect(
      rows.map((r) => ({ ...r, v: undefined, kind: undefined, ts: undefined, busbw_gbs: undefined })),
    ).toEqual(
      expected.map((e) => ({ ...e, v: undefined, kind: undefined, ts: undefined, busbw_gbs: undefined })),
    );
    for (const r of rows) expect(r.busbw_gbs).toBeGreaterThan(0);

    // The ghost's records were counted at stop, with their reason, and became no event.
    const stopped = c
      .stderr()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l))
      .find((l) => l.msg === 'stopped');
    expect(stopped.counters.records_dropped).toEqual({ nccl_inspector: { unmapped_pid: 9 } });
    expect(c.stderr()).toMatch(new RegExp(`process ${GHOST} is gone and no step event named it`));
    expect(stopped.counters.parse_errors).toEqual({});
    expect(up.pipeline.counters().dead_letters).toBe(0);
  }, 180_000);

  it('is listed in --help, and a file given for the folder is refused in one line', () => {
    const help = spawnSync(process.execPath, [BIN, 'collect', '--help'], { encoding: 'utf8' });
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/--nccl-inspector DIR +NCCL Inspector dumps/);
    expect(help.stdout).toMatch(/Known source types: .*nccl_inspector/);
    const file = join(dir, 'not-a-folder.log');
    writeFileSync(file, '');
    const r = spawnSync(process.execPath, [BIN, 'collect', '--nccl-inspector', file], { encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual([
      expect.stringMatching(/RANKWATCH_ERR_USAGE: .*is a file, --nccl-inspector needs the folder/),
    ]);
  });
});
