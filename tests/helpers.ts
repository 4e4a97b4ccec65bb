/** Small helpers the tests share: waiting for a condition, feeding `rankwatch up`, a store that can go down. */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { expect } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import { DETECTORS } from '../detectors/list.js';
import type { InsertBatch } from '../store/rows.js';
import type { Store } from '../store/store.js';

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

export interface Running {
  proc: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Sends the signal and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  /** SIGKILL if still running (for afterAll). */
  kill(): void;
}

/** Runs the built CLI as a user would, capturing its output. */
export function startRankwatch(args: string[], env: NodeJS.ProcessEnv = process.env): Running {
  const proc = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  let out = '';
  let err = '';
  proc.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  proc.stderr?.on('data', (d: Buffer) => {
    err += d.toString();
  });
  return {
    proc,
    stdout: () => out,
    stderr: () => err,
    stop: (signal = 'SIGTERM') => {
      if (proc.exitCode !== null) return Promise.resolve(proc.exitCode);
      const exit = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
      proc.kill(signal);
      return exit;
    },
    kill: () => {
      if (proc.exitCode === null) proc.kill('SIGKILL');
    },
  };
}

/** Serves fixed text at one path on 127.0.0.1 (a stand-in dcgm-exporter, say); 404 elsewhere. */
export async function serveText(
  path: string,
  body: string,
): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    if (req.url === path) res.writeHead(200, { 'content-type': 'text/plain' }).end(body);
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}${path}`,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** The real chDB store behind a switch that makes it unreachable, as a network store can be. */
export class SwitchableStore implements Store {
  readonly type = 'switchable-chdb';
  down = false;
  failures = 0;
  constructor(private readonly inner: Store) {}
  migrate() {
    return this.inner.migrate();
  }
  async insert(batches: InsertBatch[]) {
    if (this.down) {
      this.failures++;
      throw new RankwatchError('RANKWATCH_ERR_STORE_UNAVAILABLE', 'store endpoint down');
    }
    return this.inner.insert(batches);
  }
  query<T>(sql: string, params?: Record<string, unknown>) {
    return this.inner.query<T>(sql, params);
  }
  exec(sql: string) {
    return this.inner.exec(sql);
  }
  close() {
    return Promise.resolve();
  }
}

/**
 * Checks a command built its pipeline through the one builder (pipeline/build.ts): its output
 * has the builder's topology line, naming the source and every detector of detectors/list.ts in
 * order; `sinks` is matched against the rest of the line (the store, then where findings and dead
 * letters go).
 */
export function expectBuiltPipeline(output: string, source: string, sinks: RegExp): void {
  const line = output.split('\n').find((l) => l.includes('pipeline: '));
  expect(line, `no topology line in:\n${output.slice(0, 2000)}`).toBeDefined();
  const names = DETECTORS.map((d) => d.name).join(', ');
  expect(line).toContain(`pipeline: ${source} → ${DETECTORS.length} detectors (${names}) → store: `);
  expect(line!.split('→ store: ')[1].trim()).toMatch(sinks);
}

/** The reply of POST /v1/ingest to a body over `max` events (the text a client reads, written out). */
export const refusedForEvents = (max: number) => ({
  statusCode: 413,
  error: 'Payload Too Large',
  code: 'RANKWATCH_ERR_INGEST_TOO_LARGE',
  accepted: 0,
  rejected: 0,
  message: `body holds more than ${max} events, the most one request may send: split it into batches of at most ${max}; nothing of it was accepted`,
});
