/** Small helpers the tests share: waiting for a condition, feeding `rankwatch up`, a store that can go down. */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { expect } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import { DETECTORS } from '../detectors/list.js';
import type { CheckEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
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

let findingSeq = 0;

/** An open Xid 79 finding on GPU 0 of `host` that asks for a drain, a second old; `over` replaces fields. */
export function xidFinding(host: string, over: Partial<Finding> = {}): Finding {
  return {
    id: `xid-${++findingSeq}`,
    ts: Date.now() - 1_000,
    type: 'xid',
    state: 'open',
    host,
    gpu: 0,
    severity: 'critical',
    evidence: { code: 79 },
    action: 'drain',
    summary: `${host}/0: XID 79`,
    ...over,
  };
}

/** A passing `check` event (nccl-tests, dcgm-diag…) of `host` at `ts`. */
export function passingCheck(host: string, tool: string, ts: number): CheckEvent {
  return { v: 1, kind: 'check', ts, host, tool, ok: true };
}

/** A v1 fault event, now: Xid 79 on GPU 0 of `host`, with the kernel's message. */
export function xidFault(host: string) {
  return {
    v: 1 as const,
    kind: 'fault' as const,
    ts: Date.now(),
    host,
    gpu: 0,
    source: 'xid',
    code: 79,
    message: 'NVRM: Xid (PCI:0000:1b:00): 79, pid=2211, GPU has fallen off the bus.',
  };
}

/** The same as one JSON line. */
export function xidFaultLine(host: string): string {
  return JSON.stringify(xidFault(host));
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

/** The URL a `rankwatch up` or `serve` prints once it listens; fails with its stderr if it exits first. */
export function listeningUrl(r: Running, timeoutMs = 120_000): Promise<string> {
  return until(
    'the listening line',
    () => {
      if (r.proc.exitCode !== null) throw new Error(`exited ${r.proc.exitCode}: ${r.stderr()}`);
      return /listening on (http:\/\/\S+)/.exec(r.stdout())?.[1];
    },
    timeoutMs,
  );
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

/** A store every query of which fails as a ClickHouse server that refuses connections does. */
export function unreachableStore(): Store {
  return {
    type: 'down',
    migrate: async () => {},
    insert: async () => {},
    exec: async () => {},
    close: async () => {},
    query: async () => {
      throw new RankwatchError(
        'RANKWATCH_ERR_STORE_UNAVAILABLE',
        'ClickHouse at http://ch:8123 refused the connection',
      );
    },
  };
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
