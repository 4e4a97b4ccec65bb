/**
 * The whole loop through `up` (startUp, the code `rankwatch up` runs) with a real Alertmanager and
 * a real one-machine Slurm cluster whose nodes carry the simulated job's host names: a job with a
 * throttled GPU (gpu-0000) and an Xid 79 on gpu-0001 and gpu-0002; gpu-0002 was drained by a
 * person beforehand. The alerts reach Alertmanager, gpu-0001 is drained in Slurm, the audit table
 * has the action and the refusal; after the repair and a passing nccl-tests run and diagnostic
 * (ingested as `check` events), the Xid alert resolves and gpu-0001 resumes; gpu-0002 stays drained.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { automationFrom, CORDON_OPTIONS } from '../actions/cli-options.js';
import { ALERT_OPTIONS, alertingFrom } from '../alerts/cli-options.js';
import { startUp, type Up } from '../api/up.js';
import { resolveOptions } from '../cli/args.js';
import { createStore } from '../store/index.js';
import { postLines, simLines, until } from './helpers.js';
import { startAlertmanager } from './setup/alertmanager.js';
import { startSlurm } from './setup/slurm.js';

const run = promisify(execFile);
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-actions-e2e-'));
let am: Awaited<ReturnType<typeof startAlertmanager>>;
let slurm: Awaited<ReturnType<typeof startSlurm>>;
let up: Up;
let url = '';
let automation: ReturnType<typeof automationFrom>;

const scontrol = async (...args: string[]) =>
  (await run('scontrol', args, { env: { ...process.env, SLURM_CONF: slurm.conf } })).stdout;
const nodeState = async (n: string) => {
  const out = await scontrol('show', 'node', n);
  return { state: /State=(\S+)/.exec(out)?.[1] ?? '', reason: /Reason=(.*)$/m.exec(out)?.[1] ?? '' };
};
const alerts = async () =>
  (await (await fetch(`${am.url}/api/v2/alerts`)).json()) as { labels: Record<string, string> }[];

beforeAll(async () => {
  [am, slurm] = await Promise.all([startAlertmanager(), startSlurm(['gpu-0000', 'gpu-0001', 'gpu-0002'])]);
  await scontrol('update', 'nodename=gpu-0002', 'state=drain', 'reason=bad riser, ticket 77');
  const store = await createStore({ type: 'chdb', path: join(dir, 'data') } as never);
  const values = {
    'alertmanager-url': am.url,
    'cordon-driver': 'slurm',
    'slurm-conf': slurm.conf,
    'cordon-enable': true,
    'cordon-max-share': '0.9',
    'cordon-max-nodes': '2',
    'cordon-per-hour': '10',
  };
  const alerting = alertingFrom(resolveOptions(ALERT_OPTIONS, values, {}).values);
  automation = automationFrom(resolveOptions(CORDON_OPTIONS, values, {}).values, store, (fs) =>
    alerting?.onFindings(fs),
  );
  up = await startUp({ host: '127.0.0.1', port: 0, store, alerting, automation });
  url = up.url;
}, 300_000);

afterAll(async () => {
  await up?.close();
  await Promise.all([am?.stop(), slurm?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

describe('rankwatch up: alerts, drain, verify, resume', () => {
  it('alerts reach Alertmanager and the Xid node is drained in Slurm; a person-drained node is left alone', async () => {
    const lines = simLines(
      ...['--ranks', '24', '--steps', '150', '--seed', '5', '--job', 'e2e'],
      ...[
        '--fault',
        'throttle:rank=5,at=40',
        '--fault',
        'xid:rank=13,at=30,code=79',
        '--fault',
        'xid:rank=21,at=30,code=79',
      ],
      ...['--start', String(Date.now() - 5 * 60_000)],
    );
    expect(new Set(await postLines(url, lines))).toEqual(new Set([200]));
    await until('the Xid and throttle alerts', async () => {
      const a = await alerts();
      const has = (name: string, host: string) =>
        a.some((x) => x.labels.alertname === name && x.labels.host === host);
      return has('rankwatch_xid', 'gpu-0001') && has('rankwatch_throttle', 'gpu-0000') ? true : undefined;
    });
    await until('gpu-0001 drained', async () =>
      (await nodeState('gpu-0001')).state.includes('DRAIN') ? true : undefined,
    );
    expect((await nodeState('gpu-0001')).reason).toMatch(/^rankwatch: xid xid-/);
    await automation.idle();
    const rows = await up.store.query<{
      host: string;
      verb: string;
      outcome: string;
      finding_id: string;
      actor: string;
    }>(
      "SELECT host, verb, outcome, finding_id, actor FROM action_audit FINAL WHERE verb = 'cordon' ORDER BY host",
    );
    expect(rows).toMatchObject([
      { host: 'gpu-0001', outcome: 'done', actor: 'rankwatch', finding_id: expect.stringMatching(/^xid-/) },
      { host: 'gpu-0002', outcome: 'refused', actor: 'rankwatch' },
    ]);
    expect((await nodeState('gpu-0000')).state).not.toMatch(/DRAIN/);
  }, 240_000);

  it('after the repair and passing checks the alert resolves and gpu-0001 resumes; gpu-0002 stays drained', async () => {
    for (const h of ['gpu-0001', 'gpu-0002']) {
      automation.startRepair(h, 'alice');
      automation.finishRepair(h, 'alice');
    }
    const now = Date.now();
    const checks = ['gpu-0001', 'gpu-0002'].flatMap((host) => [
      JSON.stringify({
        v: 1,
        kind: 'check',
        ts: now + 1,
        host,
        tool: 'nccl-tests',
        ok: true,
        busbw_gbs: 365,
        expected_gbs: 370,
      }),
      JSON.stringify({ v: 1, kind: 'check', ts: now + 2, host, tool: 'dcgm-diag', ok: true }),
    ]);
    expect(await postLines(url, checks)).toEqual([200]);
    await until('gpu-0001 resumed', async () =>
      (await nodeState('gpu-0001')).state.includes('DRAIN') ? undefined : true,
    );
    await until('the gpu-0001 Xid alert resolved', async () =>
      (await alerts()).some((x) => x.labels.alertname === 'rankwatch_xid' && x.labels.host === 'gpu-0001')
        ? undefined
        : true,
    );
    await automation.idle();
    expect(await nodeState('gpu-0002')).toMatchObject({
      state: expect.stringMatching(/DRAIN/),
      reason: expect.stringMatching(/^bad riser, ticket 77/),
    });
    const back = await up.store.query<{ host: string; outcome: string }>(
      "SELECT host, outcome FROM action_audit FINAL WHERE verb = 'uncordon' ORDER BY host",
    );
    expect(back).toEqual([{ host: 'gpu-0001', outcome: 'done' }]);
    const health = await up.store.query<{ to_state: string }>(
      "SELECT to_state FROM node_health FINAL WHERE host = 'gpu-0001' AND gpu = -1 ORDER BY ts, to_state",
    );
    expect(health.map((h) => h.to_state)).toEqual([
      'cordoned',
      'suspect',
      'repairing',
      'verifying',
      'healthy',
    ]);
  }, 120_000);
});
