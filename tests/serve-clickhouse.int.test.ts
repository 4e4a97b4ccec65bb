/**
 * `rankwatch serve` over a ClickHouse server that another process wrote to (here `rankwatch
 * replay --clickhouse-url`, standing in for `detect`): the read API answers with the job, scoped
 * tokens hold, and `report` names the throttled host both through the API and from the server
 * directly. The server is tests/fixtures/chdb-http-server.ts, or a real one when CLICKHOUSE_URL is
 * set or Docker runs (as in up-clickhouse.int.test.ts).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ChdbHttpServer, startChdbHttpServer } from './fixtures/chdb-http-server.js';
import { type RealClickHouse, realClickHouse } from './fixtures/clickhouse-server.js';
import { BIN, type Running, simLines, startRankwatch, until } from './helpers.js';

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-serve-ch-'));
const database = `rankwatch_serve_${process.pid}`;
const READER = 'reader-0123456789abcdef';

describe('rankwatch serve --clickhouse-url', () => {
  let fixture: ChdbHttpServer | undefined;
  let real: RealClickHouse | undefined;
  let serve: Running;
  let url = '';
  let env: NodeJS.ProcessEnv;
  let ch: string[];

  beforeAll(async () => {
    real = await realClickHouse();
    if (!real) fixture = await startChdbHttpServer({ path: join(dir, 'ch') });
    const serverUrl = real?.url ?? (fixture as ChdbHttpServer).url;
    env = {
      ...process.env,
      CLICKHOUSE_URL: '',
      CLICKHOUSE_USER: real?.user ?? '',
      CLICKHOUSE_PASSWORD: real?.password ?? '',
    };
    ch = ['--clickhouse-url', serverUrl, '--clickhouse-database', database];
    const file = join(dir, 'job.jsonl');
    const lines = simLines(
      '--ranks',
      '16',
      '--steps',
      '150',
      '--seed',
      '4',
      '--job',
      'srvjob',
      '--fault',
      'throttle:rank=9,at=40',
    );
    writeFileSync(file, `${lines.join('\n')}\n`);
    await run(process.execPath, [BIN, 'replay', file, '--quiet', '--findings', join(dir, 'f.jsonl'), ...ch], {
      env,
      maxBuffer: 64 << 20,
    });
    const auth = join(dir, 'auth.json');
    writeFileSync(
      auth,
      JSON.stringify({ tokens: [{ name: 'dashboards', token: READER, scopes: ['read'] }] }),
    );
    serve = startRankwatch(['serve', '--port', '0', '--auth', auth, ...ch], env);
    url = await until('the listening line', () => /listening on (http:\/\/\S+)/.exec(serve.stdout())?.[1]);
  }, 180_000);

  afterAll(async () => {
    serve?.kill();
    await fixture?.close();
    await real?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers with the job written by another process, behind the read scope', async () => {
    expect(serve.stdout()).toMatch(/reading ClickHouse at http/);
    expect((await fetch(`${url}/v1/jobs`)).status).toBe(401);
    const r = await fetch(`${url}/v1/jobs/srvjob`, { headers: { authorization: `Bearer ${READER}` } });
    expect(r.status).toBe(200);
    const job = (await r.json()) as {
      ranks: number;
      findings: { type: string; host: string; rank?: number }[];
    };
    expect(job.ranks).toBe(16);
    const throttle = job.findings.find((f) => f.type === 'throttle');
    expect(throttle?.rank).toBe(9);
    const report = await run(process.execPath, [BIN, 'report', 'srvjob', '--api', url, '--token', READER], {
      env,
    });
    expect(report.stdout).toContain(`${throttle?.host}/`);
    const direct = await run(process.execPath, [BIN, 'report', 'srvjob', ...ch], { env });
    expect(direct.stdout).toContain(`${throttle?.host}/`);
    expect(await serve.stop()).toBe(0);
  }, 120_000);
});
