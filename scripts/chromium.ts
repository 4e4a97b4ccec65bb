/**
 * Headless Chromium from Debian for the browser test and `npm run screenshots`: installed with
 * apt-get when missing (as deploy/kafka/kafka.sh fetches its broker), driven by playwright-core.
 * RANKWATCH_CHROMIUM names another binary.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { type Browser, chromium } from 'playwright-core';

export const CHROMIUM = process.env.RANKWATCH_CHROMIUM ?? '/usr/bin/chromium';

export function ensureChromium(): string {
  if (existsSync(CHROMIUM)) return CHROMIUM;
  if (process.getuid?.() !== 0)
    throw new Error(
      `no Chromium at ${CHROMIUM}: install it (sudo apt-get install -y chromium) or set RANKWATCH_CHROMIUM`,
    );
  process.stderr.write('chromium: installing the Debian package (first run only)\n');
  // Waits for another apt-get or dpkg holding apt's locks instead of failing.
  const install = join(import.meta.dirname, '..', 'deploy', 'apt-install.sh');
  execFileSync('bash', [install, '--no-install-recommends', 'chromium'], { stdio: 'inherit' });
  if (!existsSync(CHROMIUM)) throw new Error(`apt-get installed chromium but ${CHROMIUM} is missing`);
  return CHROMIUM;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: ensureChromium(),
    headless: true,
    // --no-sandbox: containers and CI run as root, where Chromium's sandbox refuses to start.
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
}
