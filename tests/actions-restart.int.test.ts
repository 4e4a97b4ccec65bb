/**
 * The repair loop keeps its word across restarts of the built `rankwatch up`, with a real
 * one-machine Slurm cluster (Debian's slurmctld + slurmd 22.05) whose nodes are gpu-0001..4:
 * two nodes drained under `--cordon-max-nodes 2`; after a SIGINT and after a SIGKILL, new bursts
 * are refused (audited and logged) and still exactly two are out; a tripped breaker stays tripped
 * across restarts of both kinds, with /healthz degraded, the /metrics series and an alert (a
 * webhook receiver) while it is; the nodes drained before the restarts are repaired and resumed.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listeningUrl, postLines, type Running, startRankwatch, until, xidFaultLine } from './helpers.js';
import { startSlurm } from './setup/slurm.js';

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-actions-restart-'));
const data = join(dir, 'data');
let slurm: Awaited<ReturnType<typeof startSlurm>>;
let hook: Server;
let hookUrl = '';
/** Finding events the webhook received, in order. */
const alerts: { type: string; state: string; summary: string }[] = [];
const running: Running[] = [];

const sinfo = async () =>
  (
    await run('sinfo', ['--noheader', '--Node', '--format', '%N|%T|%E'], {
      env: { ...process.env, SLURM_CONF: slurm.conf },
    })
  ).stdout;
/** Nodes Slurm has drained (or draining) with rankwatch's reason, as Slurm itself says. */
const drainedByRankwatch = async () =>
  (await sinfo())
    .split('\n')
    .map((l) => l.split('|'))
    .filter(([, state, reason]) => /drain/.test(state ?? '') && reason?.startsWith('rankwatch:'))
    .map(([n]) => n)
    .sort();

const checks = (host: string) => {
  const t = Date.now() + 1_000;
  return [
    JSON.stringify({
      v: 1,
      kind: 'check',
      ts: t,
      host,
      tool: 'nccl-tests',
      ok: true,
      busbw_gbs: 365,
      expected_gbs: 370,
    }),
    JSON.stringify({ v: 1, kind: 'check', ts: t + 1, host, tool: 'dcgm-diag', ok: true }),
  ];
};

async function startUp(): Promise<{ up: Running; url: string }> {
  const up = startRankwatch([
    'up',
    ...['--port', '0', '--data', data],
    ...['--cordon-driver', 'slurm', '--slurm-conf', slurm.conf, '--cordon-enable'],
    ...['--cordon-max-nodes', '2', '--cordon-max-share', '0.9', '--cordon-per-hour', '20'],
    ...['--alert-webhook', hookUrl],
  ]);
  running.push(up);
  const url = await listeningUrl(up);
  return { up, url };
}

const get = async (url: string) => {
  const r = await fetch(url);
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
};
const post = async (url: string, body?: object) => {
  const r = await fetch(url, {
    method: 'POST',
    ...(body ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : {}),
  });
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
};
/** Waits for a decision's log line: `action VERB HOST OUTCOME…`. */
const logged = (up: Running, line: RegExp) =>
  until(`the log line ${line}`, () => (line.test(up.stderr()) ? true : undefined), 60_000);

/** Repair start and finish through the API, then passing checks: Slurm resumes the node. */
async function repairAndVerify(url: string, host: string): Promise<void> {
  expect((await post(`${url}/v1/nodes/${host}/repair`, { phase: 'start' })).status).toBe(200);
  expect((await post(`${url}/v1/nodes/${host}/repair`, { phase: 'finish' })).status).toBe(200);
  expect(await postLines(url, checks(host))).toEqual([200]);
  await until(`${host} resumed in Slurm`, async () =>
    (await drainedByRankwatch()).includes(host) ? undefined : true,
  );
}

beforeAll(async () => {
  hook = createServer((req, res) => {
    let text = '';
    req.on('data', (c) => (text += c));
    req.on('end', () => {
      alerts.push((JSON.parse(text) as { finding: (typeof alerts)[number] }).finding);
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
  hookUrl = `http://127.0.0.1:${(hook.address() as { port: number }).port}/hook`;
  slurm = await startSlurm(['gpu-0001', 'gpu-0002', 'gpu-0003', 'gpu-0004']);
}, 300_000);

afterAll(async () => {
  for (const r of running) r.kill();
  await slurm?.stop();
  await new Promise((r) => hook?.close(r));
  rmSync(dir, { recursive: true, force: true });
});

describe('rankwatch up: the repair loop across restarts, with real Slurm', () => {
  it('keeps 2 out under --cordon-max-nodes 2 across SIGINT and SIGKILL; a tripped breaker stays tripped; stranded nodes repair and resume', async () => {
    // Run 1: two drained, the third refused by the budget.
    let { up, url } = await startUp();
    expect(up.stderr()).toMatch(
      /repair loop: act · driver: slurm · budget: 2 node\(s\) out at once \(--cordon-max-nodes 2; 4 in the slurm fleet\)/,
    );
    expect(await postLines(url, [xidFaultLine('gpu-0001'), xidFaultLine('gpu-0002')])).toEqual([200]);
    await until('2 drained', async () => ((await drainedByRankwatch()).length === 2 ? true : undefined));
    expect(await postLines(url, [xidFaultLine('gpu-0003')])).toEqual([200]);
    await logged(
      up,
      /WARN rankwatch up: action cordon gpu-0003 refused \(max_nodes\): fleet budget: 2 of 4 nodes out, limit 2/,
    );
    expect(up.stderr()).toMatch(/INFO rankwatch up: action cordon gpu-0001 done: /);
    expect(await up.stop('SIGINT')).toBe(0);

    // Run 2, after a clean stop: the state is back; a new burst is refused and logged.
    ({ up, url } = await startUp());
    expect(up.stderr()).toMatch(/leader \(lease epoch \d+\): state restored from the store/);
    expect(up.stderr()).toMatch(/out: 2 by rankwatch/);
    expect(await postLines(url, [xidFaultLine('gpu-0004')])).toEqual([200]);
    await logged(up, /action cordon gpu-0004 refused \(max_nodes\): fleet budget: 2 of 4 nodes out, limit 2/);
    expect(await drainedByRankwatch()).toEqual(['gpu-0001', 'gpu-0002']);
    const audit = (await get(`${url}/v1/actions?host=gpu-0004`)).body.audit as {
      outcome: string;
      reason: string;
    }[];
    expect(audit).toContainEqual(
      expect.objectContaining({ outcome: 'refused', reason: expect.stringMatching(/^fleet budget/) }),
    );
    up.proc.kill('SIGKILL');
    await new Promise((r) => up.proc.once('exit', r));

    // Run 3, after a crash: still 2 out; a burst trips the breaker (asks of every run count).
    ({ up, url } = await startUp());
    expect(await postLines(url, [xidFaultLine('gpu-0005')])).toEqual([200]);
    await logged(up, /action cordon gpu-0005 refused \(max_nodes\)/);
    expect(await drainedByRankwatch()).toEqual(['gpu-0001', 'gpu-0002']);
    expect((await get(`${url}/healthz`)).body).toMatchObject({ ok: true, status: 'ok' });
    expect(
      await postLines(
        url,
        ['0010', '0011', '0012', '0013', '0014'].map((h) => xidFaultLine(`gpu-${h}`)),
      ),
    ).toEqual([200]);
    await logged(
      up,
      /ERROR rankwatch up: action breaker_trip gpu-\d+ done: breaker tripped: 10 cordon requests within 10 min/,
    );
    const tripped = await get(`${url}/healthz`);
    expect(tripped.status).toBe(200);
    expect(tripped.body).toMatchObject({
      ok: true,
      status: 'degraded',
      checks: {
        actions: { ok: false, degraded: true, reason: expect.stringMatching(/^cordon breaker tripped/) },
      },
    });
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/^rankwatch_actions_breaker_tripped 1$/m);
    expect(metrics).toMatch(/^rankwatch_actions_nodes_out\{by="rankwatch",reason="xid"\} 2$/m);
    expect(metrics).toMatch(/^rankwatch_actions_decisions_total\{verb="cordon",outcome="refused"\} \d+$/m);
    expect(metrics).toMatch(/^rankwatch_actions_decisions_total\{verb="breaker_trip",outcome="done"\} 1$/m);
    expect(metrics).toMatch(/^rankwatch_health_check_ok\{check="actions"\} 0$/m);
    await until('the breaker alert', () =>
      alerts.some((a) => a.type === 'cordon_breaker' && a.state === 'open') ? true : undefined,
    );
    // Tripped, a verified node still returns: the one drained two restarts ago.
    await repairAndVerify(url, 'gpu-0001');
    expect(await up.stop('SIGINT')).toBe(0);

    // Run 4: the breaker is still tripped after a clean stop; gpu-0002 is still ours to repair.
    ({ up, url } = await startUp());
    expect(up.stderr()).toMatch(/breaker: 10 requests in 10 min \(TRIPPED since /);
    expect((await get(`${url}/healthz`)).body).toMatchObject({ status: 'degraded' });
    expect((await get(`${url}/v1/actions`)).body).toMatchObject({ breaker_tripped: true, leading: true });
    expect(await postLines(url, [xidFaultLine('gpu-0020')])).toEqual([200]);
    await logged(up, /action cordon gpu-0020 refused \(breaker\): breaker tripped/);
    expect(await drainedByRankwatch()).toEqual(['gpu-0002']);
    await repairAndVerify(url, 'gpu-0002');
    up.proc.kill('SIGKILL');
    await new Promise((r) => up.proc.once('exit', r));

    // Run 5: still tripped after a crash, until an admin resets it; its alert then resolves.
    ({ up, url } = await startUp());
    expect((await get(`${url}/healthz`)).body).toMatchObject({ status: 'degraded' });
    expect((await post(`${url}/v1/breaker/reset`)).body).toMatchObject({
      verb: 'breaker_reset',
      outcome: 'done',
    });
    expect((await get(`${url}/healthz`)).body).toMatchObject({ status: 'ok' });
    await until('the breaker alert resolved', () =>
      alerts.some((a) => a.type === 'cordon_breaker' && a.state === 'resolved') ? true : undefined,
    );
    expect(await drainedByRankwatch()).toEqual([]);
    expect(await up.stop('SIGINT')).toBe(0);
  }, 600_000);
});
