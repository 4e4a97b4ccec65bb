/// <reference lib="dom" />
/**
 * The built-in page in a real browser (Debian's Chromium through playwright-core) against a real
 * `rankwatch up` fed a simulated job with a throttled GPU (rank 5) and a slow NIC (rank 20):
 * the MFU chart draws, the straggler's heatmap row is the red one, both findings are listed with
 * the hosts the simulator put the faults on, checkpoint saves and an interruption are marked on
 * the MFU chart, and a wrong token gets the login, not data.
 * Screenshots go to .cache/web-test/.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../scripts/chromium.js';
import { DEMO, type DemoServer, startDemo } from '../scripts/demo-job.js';

const SHOTS = join(import.meta.dirname, '..', '.cache', 'web-test');

/** Runs in the page: pixels of the canvas at `selector` drawn opaque in about the CSS colour `colour`. */
function pixelsOf({ selector, colour }: { selector: string; colour: string }): number {
  const canvas = document.querySelector(selector) as HTMLCanvasElement;
  const [r, g, b] = (colour.match(/\d+/g) ?? []).map(Number);
  const { data } = (canvas.getContext('2d') as CanvasRenderingContext2D).getImageData(
    0,
    0,
    canvas.width,
    canvas.height,
  );
  let n = 0;
  for (let i = 0; i < data.length; i += 4)
    if (
      data[i + 3] > 200 &&
      Math.abs(data[i] - r) + Math.abs(data[i + 1] - g) + Math.abs(data[i + 2] - b) < 40
    )
      n++;
  return n;
}

describe('the web page in Chromium', { timeout: 150_000 }, () => {
  let demo: DemoServer;
  let browser: Browser;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    [demo, browser] = await Promise.all([startDemo(), launchChromium()]);
  }, 300_000);

  afterAll(async () => {
    await browser?.close();
    await demo?.stop();
  });

  const open = async (scheme: 'light' | 'dark' = 'light'): Promise<Page> => {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, colorScheme: scheme });
    // Generous: the CI box runs every test file at once on few cores.
    page.setDefaultTimeout(60_000);
    await page.goto(demo.url);
    return page;
  };
  const signIn = async (page: Page, token: string) => {
    await page.fill('input[name=token]', token);
    await page.click('button[type=submit]');
  };

  it('serves the page and its bundle without a token, from this server only', async () => {
    const html = await (await fetch(demo.url)).text();
    const refs = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]);
    expect(refs.filter((r) => r.startsWith('/web/'))).toEqual(['/web/app.css', '/web/app.js']);
    expect(refs.every((r) => r.startsWith('/') || r.startsWith('#') || r.startsWith('data:'))).toBe(true);
    const js = await fetch(`${demo.url}/web/app.js`);
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toMatch(/javascript/);
    expect((await fetch(`${demo.url}/web/secrets.json`)).status).toBe(404);
    expect((await fetch(`${demo.url}/v1/jobs`)).status).toBe(401);
  });

  it('asks for a token, and a wrong one gets the login again, not data', async () => {
    const page = await open();
    await page.waitForSelector('form#login');
    await signIn(page, 'not-the-token-at-all');
    await page.waitForSelector('form#login .error:not(:empty)');
    expect(await page.textContent('form#login .error')).toMatch(/does not know that token/);
    expect(await page.$('table.jobs')).toBeNull();
    // A deep link to the job with no token shows the login too, never the job.
    await page.goto(`${demo.url}/#/job/${DEMO.job}`);
    await page.waitForSelector('form#login');
    expect(await page.$('li.finding')).toBeNull();
    await page.screenshot({ path: join(SHOTS, 'login.png') });
    await page.close();
  });

  it('lists the job, then shows its MFU chart, the straggler row and both findings with their hosts', async () => {
    // An interruption and its restart late in the job, sent as a launcher would.
    const auth = { authorization: `Bearer ${DEMO.token}` };
    const summary = (await (await fetch(`${demo.url}/v1/jobs/${DEMO.job}`, { headers: auth })).json()) as {
      first_ts: number;
      last_ts: number;
    };
    const cut = Math.round(summary.first_ts + 0.8 * (summary.last_ts - summary.first_ts));
    const life = (ts: number, event: string) =>
      JSON.stringify({ v: 1, kind: 'job_event', ts, job: DEMO.job, event, cause: 'NCCL watchdog timeout' });
    const sent = await fetch(`${demo.url}/v1/ingest`, {
      method: 'POST',
      headers: auth,
      body: `${life(cut, 'interrupted')}\n${life(cut + 30_000, 'restart')}\n`,
    });
    expect(sent.status).toBe(200);
    const page = await open();
    await signIn(page, DEMO.token);
    await page.waitForSelector(`tr[data-job="${DEMO.job}"]`);
    await page.screenshot({ path: join(SHOTS, 'jobs.png') });

    await page.click(`a[href="#/job/${DEMO.job}"]`);
    await page.waitForSelector('canvas#heatmap[data-rows]');
    await page.waitForSelector('li.finding');

    // The MFU line is drawn: pixels of the MFU series colour on the chart's canvas.
    const mfuColour = await page.evaluate(
      () =>
        getComputedStyle(document.querySelector('#mfu-chart .u-series:nth-child(2) .u-marker') as Element)
          .borderColor,
    );
    const mfuPixels = await page.evaluate(pixelsOf, { selector: '#mfu-chart canvas', colour: mfuColour });
    expect(mfuPixels).toBeGreaterThan(500);

    // Checkpoint saves and the interruption are marked on the MFU chart: the marks it drew are the
    // saves the API has (the simulator saves every 100 steps), plus the interruption and restart.
    await page.waitForFunction(
      () => (document.querySelector('#mfu-chart') as HTMLElement).dataset.marks?.includes('interruption'),
      undefined,
      { polling: 500 },
    );
    const marks = JSON.parse((await page.getAttribute('#mfu-chart', 'data-marks')) ?? '[]') as {
      kind: string;
      ts: number;
      label: string;
    }[];
    const timeline = (await (
      await fetch(`${demo.url}/v1/jobs/${DEMO.job}/timeline`, { headers: auth })
    ).json()) as { saves: { ts: number; step: number }[] };
    expect(timeline.saves.length).toBeGreaterThanOrEqual(3);
    expect(timeline.saves.every((s) => s.step % 100 === 0)).toBe(true);
    expect(marks.filter((m) => m.kind === 'save').map((m) => m.ts)).toEqual(timeline.saves.map((s) => s.ts));
    expect(marks).toContainEqual(expect.objectContaining({ kind: 'interruption', ts: cut }));
    expect(marks).toContainEqual(expect.objectContaining({ kind: 'restart', ts: cut + 30_000 }));
    // ... and drawn: pixels of the interruption colour on the canvas.
    const markColour = await page.evaluate(() => {
      const probe = document.createElement('i');
      probe.style.color = 'var(--mark)';
      document.body.append(probe);
      const colour = getComputedStyle(probe).color;
      probe.remove();
      return colour;
    });
    const markPixels = await page.evaluate(pixelsOf, { selector: '#mfu-chart canvas', colour: markColour });
    expect(markPixels).toBeGreaterThan(20);

    // The straggler's row is the red one: mean redness of each drawn row, read from the canvas.
    const rows = await page.evaluate(() => {
      const canvas = document.querySelector('canvas#heatmap') as HTMLCanvasElement;
      const dpr = canvas.width / canvas.clientWidth;
      const left = Number(canvas.dataset.left) * dpr;
      const ctx = canvas.getContext('2d') as CanvasRenderingContext2D;
      const drawn = JSON.parse(canvas.dataset.rows ?? '[]') as {
        rank: number;
        host: string;
        y: number;
        h: number;
      }[];
      return drawn.map((r) => {
        const y = Math.floor((r.y + r.h / 2) * dpr);
        const { data } = ctx.getImageData(left, y, canvas.width - left, 1);
        let red = 0;
        for (let i = 0; i < data.length; i += 4) red += data[i] - (data[i + 1] + data[i + 2]) / 2;
        return { rank: r.rank, host: r.host, redness: red / (data.length / 4) };
      });
    });
    const throttle = demo.truth.find((t) => t.spec.type === 'throttle');
    const nic = demo.truth.find((t) => t.spec.type === 'nic');
    expect(throttle && nic).toBeTruthy();
    expect(rows).toHaveLength(DEMO.ranks);
    const straggler = rows.find((r) => r.rank === throttle?.rank);
    const others = rows.filter((r) => r.rank !== throttle?.rank).map((r) => r.redness);
    expect(straggler?.host).toBe(throttle?.host);
    expect(straggler?.redness).toBeGreaterThan(50);
    expect(straggler?.redness).toBeGreaterThan(3 * Math.max(...others));

    // Both findings, with the hosts the simulator put the faults on.
    const listed = await page.$$eval('li.finding', (els) =>
      els.map((e) => ({
        type: e.getAttribute('data-type'),
        host: e.getAttribute('data-host'),
        text: e.textContent ?? '',
      })),
    );
    expect(listed).toContainEqual(expect.objectContaining({ type: 'throttle', host: throttle?.host }));
    expect(listed).toContainEqual(expect.objectContaining({ type: 'slow_link', host: nic?.host }));
    expect(listed.find((f) => f.type === 'slow_link')?.text).toMatch(/% of throughput/);

    // The slowest GPUs: the throttled one first, with what replacing it would buy.
    const ranked = await page.$$eval('#slow-gpus tr[data-rank]', (els) =>
      els.map((e) => ({ rank: Number(e.getAttribute('data-rank')), host: e.getAttribute('data-host') })),
    );
    expect(ranked.length).toBeGreaterThan(1);
    expect(ranked[0]).toEqual({ rank: throttle?.rank, host: throttle?.host });
    expect(await page.textContent('#slow-gpus .note')).toMatch(/would buy the job ~\d/);
    await page.screenshot({ path: join(SHOTS, 'job-light.png'), fullPage: true });
    await page.close();
  });

  it('shows the fleet and reads in the dark theme', async () => {
    const page = await open('dark');
    await signIn(page, DEMO.token);
    await page.waitForSelector('table.jobs');
    await page.goto(`${demo.url}/#/fleet`);
    await page.waitForSelector('#nodes table');
    const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const [r, g, b] = (bg.match(/\d+/g) ?? []).map(Number);
    expect(r + g + b).toBeLessThan(150);
    expect(await page.textContent('#cordon')).toContain(
      demo.truth.find((t) => t.spec.type === 'throttle')?.host,
    );
    // The fleet's slowest GPUs link to the job that ranked them.
    await page.waitForSelector('#slow-gpus tr[data-rank]');
    expect(await page.getAttribute('#slow-gpus tr[data-rank] a', 'href')).toBe(`#/job/${DEMO.job}`);
    await page.screenshot({ path: join(SHOTS, 'fleet-dark.png'), fullPage: true });
    await page.close();
  });
});
