/**
 * The read side as a user runs it (the built CLI, real processes, a real socket on 127.0.0.1):
 * `rankwatch up --auth FILE` takes a simulated job with a throttled GPU through ingest; every read
 * route answers over HTTP with the job's data and refuses a missing or under-scoped token;
 * `rankwatch report JOB --api URL --token T` names the throttled host; `jobs` and `findings`
 * answer as tables and as JSON; after `up` stops, `rankwatch serve` reads the same chDB folder.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, postLines, type Running, simLines, startRankwatch, until } from './helpers.js';

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-api-'));
const data = join(dir, 'data');
const READER = 'reader-0123456789abcdef';
const ADMIN = 'admin-0123456789abcdef';
const INGEST = 'ingest-0123456789abcdef';
const authFile = join(dir, 'auth.json');
writeFileSync(
  authFile,
  JSON.stringify({
    tokens: [
      { name: 'dashboards', token: READER, scopes: ['read'] },
      { name: 'oncall', token: ADMIN, scopes: ['read', 'admin'] },
      { name: 'collectors', token: INGEST, scopes: ['ingest'] },
    ],
  }),
);
/** The host rank `rank` runs on, as the input file says. */
function lineOf(file: string, rank: number): string | undefined {
  for (const l of readFileSync(file, 'utf8').split('\n')) {
    if (!l.includes('"kind":"step"')) continue;
    const e = JSON.parse(l);
    if (e.rank === rank) return e.host;
  }
  return undefined;
}
const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
const cli = (...args: string[]) => run(process.execPath, [BIN, ...args], { maxBuffer: 64 << 20 });

describe('the read API and reports, over real processes', () => {
  let up: Running;
  let url = '';
  let throttledHost = '';

  beforeAll(async () => {
    up = startRankwatch(['up', '--port', '0', '--data', data, '--auth', authFile]);
    url = await until('the listening line', () => /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1]);
    const lines = simLines(
      '--ranks',
      '16',
      '--steps',
      '150',
      '--seed',
      '3',
      '--job',
      'rjob',
      '--fault',
      'throttle:rank=5,at=40',
    );
    expect(new Set(await postLines(url, lines, bearer(INGEST), 5000))).toEqual(new Set([200]));
    throttledHost = await until(
      'the throttle finding',
      () => /FOUND\s+throttle rjob (\S+)\/\d+ rank 5/.exec(up.stdout())?.[1],
    );
    // The pipeline stores what it found a moment after printing it.
    await until('the job in the API', async () => {
      const r = await fetch(`${url}/v1/jobs/rjob`, { headers: bearer(READER) });
      return r.ok && ((await r.json()) as { findings: unknown[] }).findings.length > 0 ? true : undefined;
    });
  }, 180_000);

  afterAll(() => {
    up?.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  it('every read route answers with the job, and refuses no token (401) and the ingest-only token (403)', async () => {
    const findings = (await (
      await fetch(`${url}/v1/findings?job=rjob`, { headers: bearer(READER) })
    ).json()) as {
      findings: { id: string; host: string; type: string }[];
    };
    const throttle = findings.findings.find((f) => f.type === 'throttle');
    expect(throttle?.host).toBe(throttledHost);
    const checks: [string, (b: Record<string, unknown>) => boolean][] = [
      ['/v1/jobs', (b) => (b.jobs as { job: string }[]).some((j) => j.job === 'rjob')],
      ['/v1/jobs/rjob', (b) => (b.hosts as string[]).includes(throttledHost)],
      ['/v1/jobs/rjob/mfu?step=30s', (b) => (b.points as unknown[]).length > 0],
      ['/v1/jobs/rjob/steps?step=30s', (b) => (b.points as unknown[]).length > 0],
      ['/v1/jobs/rjob/heatmap', (b) => (b.cells as { rank: number }[]).some((c) => c.rank === 5)],
      [`/v1/findings/${throttle?.id}`, (b) => (b.history as unknown[]).length > 0],
      ['/v1/nodes', (b) => (b.nodes as { host: string }[]).some((n) => n.host === throttledHost)],
      [
        `/v1/nodes/${throttledHost}`,
        (b) => (b.node as { throttled_gpu_minutes: number }).throttled_gpu_minutes > 0,
      ],
      ['/v1/cordon', (b) => (b.hosts as { host: string }[]).some((h) => h.host === throttledHost)],
      ['/v1/faults', (b) => Array.isArray(b.faults)],
      ['/v1/checkpoints?job=rjob', (b) => Array.isArray(b.checkpoints)],
    ];
    for (const [path, ok] of checks) {
      const r = await fetch(`${url}${path}`, { headers: bearer(READER) });
      expect(r.status, path).toBe(200);
      expect(ok((await r.json()) as Record<string, unknown>), path).toBe(true);
      expect((await fetch(`${url}${path}`)).status, path).toBe(401);
      expect((await fetch(`${url}${path}`, { headers: bearer(INGEST) })).status, path).toBe(403);
    }
    const text = await fetch(`${url}/v1/cordon`, { headers: { ...bearer(READER), accept: 'text/plain' } });
    expect((await text.text()).split('\n')).toContain(throttledHost);
    // Admin: the reader cannot ack; the on-call token can, and its name is what is stored.
    const ackUrl = `${url}/v1/findings/${throttle?.id}/ack`;
    expect((await fetch(ackUrl, { method: 'POST', headers: bearer(READER) })).status).toBe(403);
    const ack = await fetch(ackUrl, { method: 'POST', headers: bearer(ADMIN) });
    expect(ack.status).toBe(200);
    expect(await ack.json()).toMatchObject({ by: 'oncall' });
    const doc = await fetch(`${url}/openapi.json`);
    expect(doc.status).toBe(200);
    expect(Object.keys(((await doc.json()) as { paths: object }).paths)).toContain('/v1/jobs/{job}/heatmap');
  });

  it('rankwatch report JOB --api URL --token T names the throttled host', async () => {
    const { stdout } = await cli('report', 'rjob', '--api', url, '--token', READER);
    expect(stdout).toMatch(/^Job rjob: /);
    expect(stdout).toMatch(/MFU\s+\d+\.\d% now/);
    expect(stdout).toMatch(new RegExp(`throttle\\s+│ \\w+\\s+│ ${throttledHost}/\\d+ rank 5`));
    expect(stdout).toMatch(new RegExp(`${throttledHost}\\s+│ throttle`));
    const json = JSON.parse((await cli('report', 'rjob', '--api', url, '--token', READER, '--json')).stdout);
    expect(json.summary.findings[0].host).toBe(throttledHost);
  });

  it('jobs and findings answer as tables and as JSON; errors are one line with what to do', async () => {
    const jobs = JSON.parse((await cli('jobs', '--api', url, '--token', READER, '--json')).stdout);
    expect(jobs.map((j: { job: string }) => j.job)).toContain('rjob');
    expect((await cli('jobs', '--api', url, '--token', READER)).stdout).toMatch(/│ rjob\s+│/);
    const open = JSON.parse(
      (await cli('findings', '--job', 'rjob', '--open', '--api', url, '--token', READER, '--json')).stdout,
    );
    expect(open.length).toBeGreaterThan(0);
    expect(
      open.every((f: { job: string; state: string }) => f.job === 'rjob' && f.state !== 'resolved'),
    ).toBe(true);
    const missing = await cli('report', 'nojob', '--api', url, '--token', READER).catch((e) => e);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/RANKWATCH_ERR_NOT_FOUND: no job "nojob"/);
    const denied = await cli('jobs', '--api', url).catch((e) => e);
    expect(denied.code).toBe(1);
    expect(denied.stderr).toMatch(/RANKWATCH_ERR_UNAUTHORIZED/);
  });

  it('after up stops, serve reads the same chDB folder, and report reads it directly', async () => {
    expect(await up.stop()).toBe(0);
    const { stdout } = await cli('report', 'rjob', '--data', data);
    expect(stdout).toContain(throttledHost);
    const serve = startRankwatch(['serve', '--port', '0', '--data', data, '--auth', authFile]);
    try {
      const surl = await until(
        'serve listening',
        () => /listening on (http:\/\/\S+)/.exec(serve.stdout())?.[1],
      );
      const r = await fetch(`${surl}/v1/jobs/rjob`, { headers: bearer(READER) });
      expect(r.status).toBe(200);
      expect(((await r.json()) as { hosts: string[] }).hosts).toContain(throttledHost);
      expect(
        (await fetch(`${surl}/v1/ingest`, { method: 'POST', headers: bearer(INGEST), body: '{}' })).status,
      ).toBe(404);
      expect(await serve.stop()).toBe(0);
    } finally {
      serve.kill();
    }
  }, 60_000);

  it('replay with a store ends with the job report (on stdout when findings go to a file)', async () => {
    const file = join(dir, 'replay.jsonl');
    writeFileSync(
      file,
      `${simLines('--ranks', '16', '--steps', '150', '--seed', '5', '--job', 'rp', '--fault', 'throttle:rank=3,at=40').join('\n')}\n`,
    );
    const { stdout } = await cli(
      'replay',
      file,
      '--data',
      join(dir, 'replay-data'),
      '--findings',
      join(dir, 'rp.jsonl'),
    );
    const host = /throttle\s+│ \w+\s+│ (\S+)\/\d+ rank 3/.exec(stdout)?.[1];
    expect(stdout).toMatch(/^\s*Job rp: /);
    const truth = lineOf(file, 3);
    expect(host).toBe(truth);
  }, 120_000);
});
