/// <reference lib="dom" />
/**
 * One truth on every screen, on the built CLI as a person meets it: `rankwatch demo` runs a job
 * with a throttled GPU and a slow NIC; then its live lines, its summary, `rankwatch report`,
 * `rankwatch findings`, the API (`rankwatch serve` over the same folder) and the page in
 * Chromium (Debian's) are read for that job. Each finding has one cost on all of them (an
 * incident's last live line included), the job one MFU, and a resolved finding the summary it
 * had while open. An ack and a silence made through the API show on the page, in `report` and
 * `findings` with the token that made them, and each is an audit line of the server.
 * A screenshot of the job page goes to .cache/web-test/one-truth-job.png.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../scripts/chromium.js';
import { listeningUrl, type Running, startRankwatch } from './helpers.js';

const JOB = 'one-truth';
const READ = 'one-truth-read-token-0123456789';
const ADMIN = 'one-truth-admin-token-0123456789';
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-one-truth-'));
const data = join(dir, 'data');
const SHOTS = join(import.meta.dirname, '..', '.cache', 'web-test');

/** Runs the CLI to its end; stdout, stderr and exit code. */
async function cli(...args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  const r = startRankwatch(args);
  const code = await new Promise<number | null>((res) => r.proc.once('exit', (c) => res(c)));
  return { code, out: r.stdout(), err: r.stderr() };
}

/** `type host/gpu`: how a finding is named across screens (the rank is not on every one). */
const key = (type: string, host: string, gpu: string | number | undefined | null) =>
  `${type} ${host}${gpu === undefined || gpu === null || gpu === '' ? '' : `/${gpu}`}`;

/** Table rows (cli-table3) as cells, for the rows whose first cell passes `first`. */
function rows(text: string, first: RegExp): string[][] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('│'))
    .map((l) =>
      l
        .split('│')
        .slice(1, -1)
        .map((c) => c.trim()),
    )
    .filter((c) => first.test(c[0]));
}

/** The section of `text` from the line starting with `head` to the next blank line. */
const section = (text: string, head: string) => {
  const from = text.indexOf(`\n${head}`);
  expect(from, `no "${head}" in:\n${text}`).toBeGreaterThanOrEqual(0);
  const end = text.indexOf('\n\n', from + 1);
  return text.slice(from, end < 0 ? undefined : end);
};

describe('one cost per finding and one MFU on every screen', { timeout: 300_000 }, () => {
  let demo: { code: number | null; out: string; err: string };
  let serve: Running;
  let url: string;
  let browser: Browser;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    [demo, browser] = await Promise.all([
      cli('demo', '--speed', '0', '--data', data, '--ranks', '64', '--job', JOB),
      launchChromium(),
    ]);
    expect(demo.code, demo.err).toBe(0);
    const auth = join(dir, 'auth.json');
    writeFileSync(
      auth,
      JSON.stringify({
        tokens: [
          { name: 'dashboards', token: READ, scopes: ['read'] },
          { name: 'oncall', token: ADMIN, scopes: ['read', 'admin'] },
        ],
      }),
      { mode: 0o600 },
    );
    serve = startRankwatch(['serve', '--port', '0', '--data', data, '--auth', auth]);
    url = await listeningUrl(serve);
  }, 300_000);

  afterAll(async () => {
    await browser?.close();
    await serve?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const get = async <T>(path: string): Promise<T> => {
    const res = await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${READ}` } });
    expect(res.status, path).toBe(200);
    return (await res.json()) as T;
  };
  interface ApiFinding {
    id: string;
    type: string;
    host: string;
    gpu?: number;
    state: string;
    est_cost_pct?: number;
    summary: string;
    resolution?: string;
  }
  /** The job's page, signed in with the read token, once its findings are listed. */
  const jobPage = async (): Promise<Page> => {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    page.setDefaultTimeout(60_000);
    await page.goto(url);
    await page.fill('input[name=token]', READ);
    await page.click('button[type=submit]');
    await page.waitForSelector(`tr[data-job="${JOB}"]`);
    await page.goto(`${url}/#/job/${JOB}`);
    await page.waitForSelector('li.finding');
    return page;
  };
  const apiFindings = async () =>
    (await get<{ findings: ApiFinding[] }>(`/v1/findings?job=${JOB}&limit=1000`)).findings;
  const pct = (v: number | undefined) => (v === undefined ? '-' : `${(Math.round(v * 10) / 10).toFixed(1)}%`);

  it('gives each finding one cost and the job one MFU: live lines, summary, report, API and page', async () => {
    // The API: each incident's latest state, and the job's MFU.
    const api = await apiFindings();
    const costed = api.filter((f) => f.est_cost_pct !== undefined);
    // The demo's two faults: a straggler (and the throttle behind it) and a slow link, at least.
    expect(costed.map((f) => f.type)).toEqual(expect.arrayContaining(['straggler', 'throttle', 'slow_link']));
    const want = new Map(api.map((f) => [key(f.type, f.host, f.gpu), pct(f.est_cost_pct)]));
    expect(want.size).toBe(api.length);
    const job = await get<{ mfu_avg: number }>(`/v1/jobs/${JOB}`);
    const mfu = `${(job.mfu_avg * 100).toFixed(1)}%`;

    // Live lines: the last one of each incident says the cost every other screen says.
    const live = new Map<string, string>();
    for (const m of demo.out.matchAll(
      /^\[\d\d:\d\d\] (?:FOUND|UPDATED|RESOLVED) +(\S+) (gpu-\d+(?:\/\d+)?)(?: rank \d+)?(?: · cost (\S+%))?: /gm,
    ))
      live.set(`${m[1]} ${m[2]}`, m[3] ?? '-');
    for (const [k, c] of want) expect(live.get(k), k).toBe(c);
    // An mfu_drop names its probable cause's host, which may change while it is open: an earlier
    // line may name another host, never another type.
    const types = new Set(api.map((f) => f.type));
    for (const k of live.keys()) expect(types).toContain(k.split(' ')[0]);
    // ...and every sentence that names a cost names the one its line shows.
    for (const m of demo.out.matchAll(/· cost (\S+%): .*costs the job ~(\S+%)/g)) expect(m[2]).toBe(m[1]);

    // The demo's summary: its findings table, its injected-fault costs, its MFU.
    const table = rows(section(demo.out, 'Findings (stored'), /^(?!type$)[a-z_]+$/);
    const summary = new Map(table.map((c) => [`${c[0]} ${c[1].split(' ')[0]}`, c[6]]));
    expect(summary).toEqual(want);
    for (const c of rows(section(demo.out, 'Injected faults'), /:/)) {
      const [, where, , foundBy, , , est] = c;
      expect(est, c.join(' | ')).toBe(want.get(`${foundBy} ${where}`));
    }
    expect(demo.out).toContain(`Job MFU: ${mfu} ·`);

    // `rankwatch report`: every finding of the finished job (resolved) with its cost, and the MFU.
    const rep = await cli('report', JOB, '--api', url, '--token', READ);
    expect(rep.code, rep.err).toBe(0);
    expect(rep.out).toMatch(new RegExp(`MFU +\\S+ now, ${mfu.replace('.', '\\.')} average`));
    const reported = new Map(
      rows(section(rep.out, 'Resolved findings'), /%$|^-$/).map((c) => [
        key(c[1], c[2].split(' ')[0], undefined),
        c[0],
      ]),
    );
    expect(reported).toEqual(want);

    // The page: the job's findings with their costs, and the MFU average.
    const page = await jobPage();
    const shown = await page.$$eval('li.finding', (els) =>
      els.map((e) => {
        const d = (e as HTMLElement).dataset;
        return [
          `${d.type} ${d.host}${d.gpu ? `/${d.gpu}` : ''}`,
          d.cost || '-',
          e.textContent ?? '',
        ] as const;
      }),
    );
    expect(new Map(shown.map(([k, c]) => [k, c]))).toEqual(want);
    for (const [k, c, text] of shown) if (c !== '-') expect(text, k).toContain(`costs ${c} of throughput`);
    const kpi = await page.$$eval('.kpi', (els) =>
      els.map((e) => [e.querySelector('span')?.textContent, e.querySelector('b')?.textContent]),
    );
    expect(kpi).toContainEqual(['MFU average', mfu]);
    await page.screenshot({ path: join(SHOTS, 'one-truth-job.png'), fullPage: true });
    await page.close();
  });

  it('keeps the summary a finding had while open once it resolves, and says why it ended', async () => {
    for (const f of await apiFindings()) {
      expect(f.state).toBe('resolved');
      expect(f.resolution, f.type).toBeTruthy();
      if (f.type === 'straggler' || f.type === 'slow_link')
        expect(f.summary).toContain(`costs the job ~${pct(f.est_cost_pct)} of its throughput`);
      const { history } = await get<{ history: ApiFinding[] }>(`/v1/findings/${f.id}`);
      // The sentence it went out with while open, its figures the final ones.
      const open = history.filter((h) => h.state !== 'resolved').at(-1);
      const words = (t = '') => t.replace(/\d+(\.\d+)?/g, '#');
      expect(words(f.summary)).toBe(words(open?.summary));
    }
  });

  it('shows an ack and a silence with their actors on the page, in report and findings, each audited', async () => {
    const fs = await apiFindings();
    const link = fs.find((f) => f.type === 'slow_link')!;
    const straggler = fs.find((f) => f.type === 'straggler')!;
    const post = (path: string, body: unknown) =>
      fetch(`${url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    expect((await post(`/v1/findings/${link.id}/ack`, { note: 'reseating the NIC' })).status).toBe(200);
    expect((await post(`/v1/findings/${straggler.id}/silence`, { for: '4h' })).status).toBe(200);
    // A read token may not: the page's token cannot ack.
    const refused = await fetch(`${url}/v1/findings/${link.id}/ack`, {
      method: 'POST',
      headers: { authorization: `Bearer ${READ}` },
    });
    expect(refused.status).toBe(403);

    // The server's audit lines, one for each, naming the token.
    const err = serve.stderr() + serve.stdout();
    expect(err).toMatch(new RegExp(`audit: finding ${link.id} acked by oncall`));
    expect(err).toMatch(new RegExp(`audit: finding ${straggler.id} silenced until \\S+ by oncall`));

    const found = await cli('findings', '--job', JOB, '--api', url, '--token', READ);
    expect(found.code, found.err).toBe(0);
    const byType = new Map(rows(found.out, /^\d{4}-/).map((c) => [c[1], c[2]]));
    expect(byType.get('slow_link')).toBe('resolved, acked by oncall');
    expect(byType.get('straggler')).toMatch(
      /^resolved, silenced by oncall until \d{4}-\d\d-\d\d \d\d:\d\d UTC$/,
    );

    const rep = await cli('report', JOB, '--api', url, '--token', READ);
    const acks = new Map(rows(section(rep.out, 'Resolved findings'), /%$/).map((c) => [c[1], c[3]]));
    expect(acks.get('slow_link')).toBe('acked by oncall');
    expect(acks.get('straggler')).toMatch(/^silenced by oncall until /);

    const page = await jobPage();
    await page.waitForSelector(`li.finding[data-id="${link.id}"] .acks`);
    expect(await page.textContent(`li.finding[data-id="${link.id}"] .acks`)).toMatch(/acked by oncall/);
    expect(await page.textContent(`li.finding[data-id="${straggler.id}"] .acks`)).toMatch(
      /silenced by oncall until/,
    );
    await page.close();
  });
});
