/**
 * Two built `rankwatch up` processes sharing one ClickHouse server: one leads the repair loop,
 * the other stands by (its admin routes answer 409), and the leader decides on findings the other
 * process ingested, read back from the store. When the leader stops, the other takes the lease and
 * carries on from its stored state. The server is tests/fixtures/chdb-http-server.ts (ClickHouse's
 * HTTP interface served by the chDB engine; insert deduplication, on which the lease rests, is the
 * engine's own), or a real one when CLICKHOUSE_URL is set or Docker runs. This file opens no ChdbStore.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clickHouseForTest, type RealClickHouse } from './fixtures/clickhouse-server.js';
import { postLines, type Running, startRankwatch, until, xidFaultLine } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-repair-leader-'));
const database = `rankwatch_leader_${process.pid}`;
let real: Omit<RealClickHouse, 'source'> | undefined;
let serverUrl = '';
const running: Running[] = [];

async function startUp(name: string): Promise<{ up: Running; url: string }> {
  const up = startRankwatch(
    [
      'up',
      ...['--port', '0', '--clickhouse-url', serverUrl, '--clickhouse-database', database],
      ...['--wal', join(dir, `wal-${name}`)],
    ],
    {
      ...process.env,
      CLICKHOUSE_URL: '',
      CLICKHOUSE_USER: real?.user ?? '',
      CLICKHOUSE_PASSWORD: real?.password ?? '',
    },
  );
  running.push(up);
  const url = await until(
    `${name} listening`,
    () => {
      if (up.proc.exitCode !== null) throw new Error(`${name} exited ${up.proc.exitCode}: ${up.stderr()}`);
      return /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1];
    },
    120_000,
  );
  return { up, url };
}

beforeAll(async () => {
  real = await clickHouseForTest(join(dir, 'ch'));
  serverUrl = real.url;
}, 120_000);

afterAll(async () => {
  for (const r of running) r.kill();
  await real?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('the repair loop behind one leader', () => {
  it('one of two processes acts, on what either ingested; the other takes over with the state when it stops', async () => {
    const a = await startUp('a');
    expect(a.up.stderr()).toMatch(/repair loop: dry-run .* · leader \(lease epoch \d+\)/);
    const b = await startUp('b');
    expect(b.up.stderr()).toMatch(/repair loop: dry-run .* · standby \(the leader is \S+ \(epoch \d+\)\)/);
    expect(await (await fetch(`${b.url}/v1/actions`)).json()).toMatchObject({ leading: false });
    const refused = await fetch(`${b.url}/v1/breaker/reset`, { method: 'POST' });
    expect(refused.status).toBe(409);
    expect(((await refused.json()) as { message: string }).message).toMatch(/does not lead the repair loop/);

    // Ingested by the standby, decided by the leader (from the store), once.
    expect(await postLines(b.url, [xidFaultLine('gpu-0001')])).toEqual([200]);
    await until('the leader decides', () =>
      /action cordon gpu-0001 dry_run: dry-run/.test(a.up.stderr()) ? true : undefined,
    );
    expect(b.up.stderr()).not.toMatch(/action cordon/);

    // The leader stops cleanly: the other takes the lease at its next tick, with the state.
    expect(await a.up.stop('SIGINT')).toBe(0);
    await until(
      'b leads',
      () =>
        /repair loop: leading \(lease epoch \d+\); state restored/.test(b.up.stderr()) ? true : undefined,
      60_000,
    );
    expect(await (await fetch(`${b.url}/v1/actions`)).json()).toMatchObject({
      leading: true,
      nodes: [expect.objectContaining({ host: 'gpu-0001', state: 'cordoned', dry_run_out: true })],
    });
    // gpu-0001 still counts against the budget (one node on a fleet seen as one host), and the
    // finding fed before the handover is not fed again.
    expect(await postLines(b.url, [xidFaultLine('gpu-0002')])).toEqual([200]);
    await until('b decides', () =>
      /action cordon gpu-0002 refused \(max_share\): fleet budget: 1 of 1 nodes out, limit 1/.test(
        b.up.stderr(),
      )
        ? true
        : undefined,
    );
    expect(b.up.stderr()).not.toMatch(/action cordon gpu-0001/);
    expect(await b.up.stop('SIGINT')).toBe(0);
  }, 300_000);
});
