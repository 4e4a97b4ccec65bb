/** Small helpers the integration tests share: waiting for a condition, and feeding `rankwatch up`. */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';

export const BIN = join(import.meta.dirname, '..', 'bin', 'rankwatch.js');

/** Polls `fn` until it returns something other than undefined; fails with `what` after the timeout. */
export async function until<T>(
  what: string,
  fn: () => T | undefined | Promise<T | undefined>,
  timeoutMs = 60_000,
): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The JSON lines `rankwatch sim` writes for these arguments (event time an hour ago by default). */
export function simLines(...args: string[]): string[] {
  const start = args.includes('--start') ? [] : ['--start', String(Date.now() - 3_600_000)];
  return execFileSync(process.execPath, [BIN, 'sim', ...args, ...start], { maxBuffer: 256 << 20 })
    .toString()
    .split('\n')
    .filter(Boolean);
}

/** Posts lines to an ingest endpoint in gzip batches; returns the HTTP statuses. */
export async function postLines(
  url: string,
  lines: string[],
  headers: Record<string, string> = {},
  batch = 4000,
): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < lines.length; i += batch) {
    const res = await fetch(`${url}/v1/ingest`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/x-ndjson', 'content-encoding': 'gzip' },
      body: gzipSync(`${lines.slice(i, i + batch).join('\n')}\n`),
    });
    statuses.push(res.status);
  }
  return statuses;
}
