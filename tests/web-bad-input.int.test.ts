/// <reference lib="dom" />
/**
 * The page on bad input, in Chromium: an empty store, a job without MFU (an unknown GPU; no job
 * description at all) and a store that goes down. Each view says so in words; none is left
 * blank or "Loading…".
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../api/app.js';
import { webRoutes } from '../api/routes/web.js';
import { RankwatchError } from '../core/errors.js';
import { launchChromium } from '../scripts/chromium.js';
import { ChdbStore } from '../store/chdb.js';
import { postLines, type Running, SwitchableStore, simLines, startRankwatch, until } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-web-bad-'));

/** A real chDB store whose queries fail as an unreachable ClickHouse's do while `down`. */
class FlakyStore extends SwitchableStore {
  override query<T>(sql: string, params?: Record<string, unknown>) {
    if (this.down)
      return Promise.reject(
        new RankwatchError(
          'RANKWATCH_ERR_STORE_UNAVAILABLE',
          'ClickHouse at http://ch:8123 is unreachable: ECONNREFUSED',
        ),
      );
    return super.query<T>(sql, params);
  }
}

describe('the web page on bad input', { timeout: 150_000 }, () => {
  let browser: Browser;
  let up: Running;
  let url = '';

  beforeAll(async () => {
    up = startRankwatch(['up', '--port', '0', '--data', join(dir, 'up')]);
    [browser, url] = await Promise.all([
      launchChromium(),
      until('the listening line', () => /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1]),
    ]);
  }, 300_000);

  afterAll(async () => {
    await browser?.close();
    up?.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  const visit = async (u: string): Promise<Page> => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page.setDefaultTimeout(60_000);
    await page.goto(u);
    return page;
  };
  const noneLoading = async (page: Page) => {
    await until(
      'no section left loading',
      async () => ((await page.$('.pending')) ? undefined : true),
      20_000,
    );
  };

  it('says the store is empty, on the jobs and the fleet page, and names an unknown job', async () => {
    const page = await visit(url);
    await page.waitForSelector('#jobs .empty');
    expect(await page.textContent('#jobs')).toMatch(/no jobs with steps/);
    await page.goto(`${url}/#/fleet`);
    await page.waitForSelector('#nodes .empty');
    expect(await page.textContent('#nodes')).toMatch(/No node has reported/);
    await noneLoading(page);
    await page.goto(`${url}/#/job/nosuchjob`);
    await page.waitForSelector('#banner');
    expect(await page.textContent('#banner')).toMatch(/no job "nosuchjob" in the store/);
    await noneLoading(page);
    await page.close();
  });

  it('says why a job has no MFU: an unknown GPU, or no job description', async () => {
    const unknownGpu = simLines(
      '--ranks',
      '8',
      '--steps',
      '60',
      '--job',
      'odd-gpu',
      '--gpu-model',
      'XYZ-9000',
    );
    const noDesc = simLines('--ranks', '8', '--steps', '60', '--job', 'no-desc').filter(
      (l) => !l.includes('"kind":"job"'),
    );
    expect(new Set(await postLines(url, [...unknownGpu, ...noDesc]))).toEqual(new Set([200]));
    await until('both jobs listed', async () => {
      const { jobs } = (await (await fetch(`${url}/v1/jobs`)).json()) as { jobs: unknown[] };
      return jobs.length === 2 ? true : undefined;
    });
    const page = await visit(`${url}/#/job/odd-gpu`);
    await page.waitForSelector('#mfu-note.empty');
    expect(await page.textContent('#mfu-note')).toMatch(/GPU "XYZ-9000" has no peak FLOP\/s/);
    expect(await page.isVisible('#mfu-chart')).toBe(false);
    await page.goto(`${url}/#/job/no-desc`);
    await page.waitForFunction(() =>
      /no job description/.test(document.querySelector('#mfu-note')?.textContent ?? ''),
    );
    // The rest of the job still shows: steps and the heatmap do not need MFU.
    await page.waitForSelector('canvas#heatmap[data-rows]');
    await noneLoading(page);
    await page.goto(url);
    await page.waitForSelector('tr[data-job="no-desc"]');
    expect(await page.textContent('tr[data-job="no-desc"]')).toMatch(/no job description/);
    await page.close();
  }, 120_000);

  it('says how to build the page when the bundle is missing', async () => {
    const app = Fastify();
    await app.register(webRoutes, { dir: join(dir, 'no-bundle-here') });
    const res = await app.inject('/');
    expect(res.statusCode).toBe(200);
    expect(res.body).toMatch(/The page is not built: run <code>npm run build<\/code>/);
    expect((await app.inject('/web/app.js')).statusCode).toBe(404);
    await app.close();
  });

  describe('with the store down', () => {
    let app: FastifyInstance;
    let store: FlakyStore;
    let appUrl = '';
    beforeAll(async () => {
      store = new FlakyStore(new ChdbStore({ path: join(dir, 'flaky') }));
      await store.migrate();
      app = await buildApp({ store });
      appUrl = await app.listen({ host: '127.0.0.1', port: 0 });
    });
    afterAll(() => app?.close());

    it('says the store is down on every page instead of loading forever', async () => {
      store.down = true;
      const page = await visit(appUrl);
      for (const view of ['#/', '#/fleet', '#/job/any']) {
        await page.goto(`${appUrl}/${view}`);
        await page.waitForSelector('#banner');
        expect(await page.textContent('#banner')).toMatch(
          /store is down \(store unavailable: ClickHouse at .* is unreachable/,
        );
        await noneLoading(page);
      }
      // It tries again on its own: back up, the jobs page clears the message and shows the (empty) store.
      await page.goto(`${appUrl}/#/`);
      await page.waitForSelector('#banner');
      store.down = false;
      await page.waitForSelector('#jobs .empty');
      expect(await page.$('#banner')).toBeNull();
      await page.close();
    });
  });
});
