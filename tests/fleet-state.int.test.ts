/// <reference lib="dom" />
/**
 * The fleet page and GET /v1/nodes show what the repair loop holds each node to be, apart from
 * what its open findings ask for, on the built `rankwatch up` (dry-run, as it starts by default)
 * and Debian's Chromium: an Xid 79 on one of 8 hosts asks for a drain, the dry-run takes the host
 * out on paper (cordoned), an admin starts its repair (repairing) while the finding still asks
 * for a drain. The automation panel says mode, driver, breaker, budget used of its limit and the
 * pending approvals. After `up` stops, `serve` over the same folder shows the same node states,
 * read from the durable state in the store, and a panel that says no repair loop runs there.
 * A screenshot goes to .cache/web-test/fleet-state.png.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../scripts/chromium.js';
import { listeningUrl, postLines, type Running, startRankwatch, until, xidFaultLine } from './helpers.js';

const READ = 'fleet-state-read-token-0123456789';
const ADMIN = 'fleet-state-admin-token-0123456789';
const HOSTS = Array.from({ length: 8 }, (_, i) => `gpu-${String(i + 1).padStart(4, '0')}`);
const BAD = HOSTS[2];
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-fleet-state-'));
const data = join(dir, 'data');
const auth = join(dir, 'auth.json');
const SHOTS = join(import.meta.dirname, '..', '.cache', 'web-test');

interface NodeRow {
  host: string;
  state: string;
  worst_action: string;
  out_by_rankwatch: boolean;
  dry_run_out: boolean;
}

const gpuLine = (host: string) =>
  JSON.stringify({
    v: 1,
    kind: 'gpu',
    ts: Date.now(),
    host,
    gpu: 0,
    sm_clock_mhz: 1980,
    throttle_reasons: 0,
  });

describe('node state apart from what findings ask, and the automation panel', { timeout: 240_000 }, () => {
  let browser: Browser;
  const running: Running[] = [];

  beforeAll(async () => {
    writeFileSync(
      auth,
      JSON.stringify({
        tokens: [
          { name: 'dashboards', token: READ, scopes: ['read', 'ingest'] },
          { name: 'oncall', token: ADMIN, scopes: ['read', 'admin'] },
        ],
      }),
      { mode: 0o600 },
    );
    mkdirSync(SHOTS, { recursive: true });
    browser = await launchChromium();
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    for (const r of running) r.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  const start = async (command: 'up' | 'serve') => {
    const r = startRankwatch([command, '--port', '0', '--data', data, '--auth', auth]);
    running.push(r);
    return { r, url: await listeningUrl(r) };
  };
  const get = async <T>(url: string, path: string): Promise<T> => {
    const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${READ}` } });
    expect(res.status, path).toBe(200);
    return (await res.json()) as T;
  };
  const nodes = async (url: string) =>
    new Map((await get<{ nodes: NodeRow[] }>(url, '/v1/nodes')).nodes.map((n) => [n.host, n]));
  const fleetPage = async (url: string): Promise<Page> => {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    page.setDefaultTimeout(60_000);
    await page.goto(url);
    await page.fill('input[name=token]', READ);
    await page.click('button[type=submit]');
    await page.waitForFunction(() => sessionStorage.getItem('rankwatch.token'));
    await page.goto(`${url}/#/fleet`);
    await page.waitForSelector(`tr[data-host="${BAD}"]`);
    await page.waitForSelector('#automation .kpi');
    return page;
  };
  const panel = (page: Page) =>
    page.$$eval('#automation .kpi', (els) =>
      Object.fromEntries(
        els.map((e) => [(e as HTMLElement).dataset.key, e.querySelector('b')?.textContent?.trim()]),
      ),
    );

  it('up: the state is the loop’s (cordoned on paper, then repairing), the ask stays the finding’s', async () => {
    const { r: up, url } = await start('up');
    const statuses = await postLines(url, [...HOSTS.map(gpuLine), xidFaultLine(BAD)], {
      authorization: `Bearer ${READ}`,
    });
    expect(statuses).toEqual([200]);
    await until('the dry-run cordon', async () => {
      const n = (await nodes(url)).get(BAD);
      return n?.state === 'cordoned' ? n : undefined;
    });
    let byHost = await nodes(url);
    expect(byHost.get(BAD)).toMatchObject({
      state: 'cordoned',
      worst_action: 'drain',
      dry_run_out: true,
      out_by_rankwatch: false,
    });
    expect(byHost.get(HOSTS[0])).toMatchObject({
      state: 'healthy',
      worst_action: 'none',
      dry_run_out: false,
    });
    // Nodes out of their healthy state come first.
    expect((await get<{ nodes: NodeRow[] }>(url, '/v1/nodes')).nodes[0].host).toBe(BAD);

    const actions = await get<{ mode: string; budget: Record<string, unknown> }>(url, '/v1/actions');
    expect(actions.mode).toBe('dry_run');
    expect(actions.budget).toMatchObject({
      nodes_out: 1,
      nodes_limit: 1,
      fleet: 8,
      breaker_tripped_at: null,
      limit_by: expect.stringMatching(/--cordon-max-share 0.05 of 8 rounds to 0: one node is the floor/),
    });

    const repair = await fetch(`${url}/v1/nodes/${BAD}/repair`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ phase: 'start' }),
    });
    expect(repair.status).toBe(200);
    byHost = await nodes(url);
    expect(byHost.get(BAD)).toMatchObject({ state: 'repairing', worst_action: 'drain' });

    const page = await fleetPage(url);
    const row = await page.$eval(`tr[data-host="${BAD}"]`, (e) => ({
      state: (e as HTMLElement).dataset.state,
      asks: (e as HTMLElement).dataset.asks,
      text: e.textContent ?? '',
    }));
    expect(row).toMatchObject({ state: 'repairing', asks: 'drain' });
    expect(row.text).toMatch(/repairing.*out on paper \(dry-run\).*drain/s);
    const healthy = await page.$eval(`tr[data-host="${HOSTS[0]}"]`, (e) => (e as HTMLElement).dataset.state);
    expect(healthy).toBe('healthy');
    expect(await panel(page)).toEqual({
      mode: 'dry-run',
      driver: 'none',
      breaker: 'closed',
      nodes: '1 / 1',
      hour: expect.stringMatching(/^\d+ \/ \d+$/),
      pending: '0',
    });
    await page.screenshot({ path: join(SHOTS, 'fleet-state.png'), fullPage: true });
    await page.close();
    expect(await up.stop('SIGINT')).toBe(0);
  });

  it('serve: the same states, from the durable state in the store; no repair loop runs there', async () => {
    const { url } = await start('serve');
    const byHost = await nodes(url);
    expect(byHost.get(BAD)).toMatchObject({ state: 'repairing', worst_action: 'drain', dry_run_out: true });
    expect(byHost.get(HOSTS[0])?.state).toBe('healthy');
    const page = await fleetPage(url);
    expect(await panel(page)).toEqual({ mode: 'off' });
    expect(await page.textContent('#automation')).toMatch(/No repair loop runs in this server/);
    await page.close();
  });
});
