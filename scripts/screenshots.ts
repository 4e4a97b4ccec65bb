/**
 * `npm run screenshots`: regenerates docs/screenshots/job.png and fleet.png from a simulated job
 * (scripts/demo-job.ts: a throttled GPU, a slow NIC, one XID) served by a real `rankwatch up`,
 * photographed by headless Chromium at a laptop's 1440×900.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { until } from '../tests/helpers.js';
import { launchChromium } from './chromium.js';
import { DEMO, startDemo } from './demo-job.js';

const OUT = join(import.meta.dirname, '..', 'docs', 'screenshots');
mkdirSync(OUT, { recursive: true });
const demo = await startDemo(['xid:rank=28,at=520,code=79']);
// The whole job processed, so the pictures show it to its last step.
await until(
  'the last step',
  async () => {
    const res = await fetch(`${demo.url}/v1/jobs/${DEMO.job}`, {
      headers: { authorization: `Bearer ${DEMO.token}` },
    });
    const job = (await res.json()) as { last_step: number };
    return job.last_step >= DEMO.steps - 1 ? true : undefined;
  },
  120_000,
);
const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 }, colorScheme: 'light' });
  await page.goto(demo.url);
  await page.fill('input[name=token]', DEMO.token);
  await page.click('button[type=submit]');
  await page.waitForSelector(`tr[data-job="${DEMO.job}"]`);
  await page.goto(`${demo.url}/#/job/${DEMO.job}`);
  await page.waitForSelector('canvas#heatmap[data-rows]');
  await page.waitForSelector('li.finding');
  await page.screenshot({ path: join(OUT, 'job.png'), fullPage: true });
  await page.goto(`${demo.url}/#/fleet`);
  await page.waitForSelector('#nodes table');
  await page.waitForSelector('#fault-note:not(.pending)');
  await page.screenshot({ path: join(OUT, 'fleet.png'), fullPage: true });
  process.stdout.write(`wrote ${join(OUT, 'job.png')} and ${join(OUT, 'fleet.png')}\n`);
} finally {
  await browser.close();
  await demo.stop();
}
