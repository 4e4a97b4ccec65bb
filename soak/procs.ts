/** Processes the harness runs and breaks: the built CLI, the chDB HTTP store, the Kafka broker. */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
export const ROOT = join(import.meta.dirname, '..');
const BIN = join(ROOT, 'bin', 'rankwatch.js');
const KAFKA = join(ROOT, 'deploy', 'kafka', 'kafka.sh');
const CHDB_HTTP = join(ROOT, 'tests', 'fixtures', 'chdb-http-server.ts');

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** A child process whose output is kept (the last 256 KiB) for the report when something fails. */
export class Proc {
  readonly child: ChildProcess;
  private out = '';
  constructor(
    readonly name: string,
    cmd: string,
    args: string[],
    env: NodeJS.ProcessEnv = process.env,
  ) {
    this.child = spawn(cmd, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const keep = (b: Buffer) => {
      this.out = (this.out + b.toString()).slice(-(256 << 10));
    };
    this.child.stdout?.on('data', keep);
    this.child.stderr?.on('data', keep);
  }
  static cli(name: string, args: string[], env?: NodeJS.ProcessEnv): Proc {
    return new Proc(name, process.execPath, [BIN, ...args], env);
  }
  log(): string {
    return this.out;
  }
  /** Appends what it printed to DIR/NAME.log, for a look after a failed run. */
  save(dir: string): void {
    appendFileSync(join(dir, `${this.name}.log`), `--- pid ${this.child.pid}\n${this.out}\n`);
  }
  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }
  /** Sends `signal` and waits for the exit (SIGKILL after `ms`); resolves with the exit code or signal. */
  async stop(signal: NodeJS.Signals = 'SIGTERM', ms = 60_000): Promise<number | string | null> {
    if (!this.running) return this.child.exitCode ?? this.child.signalCode;
    const exit = new Promise<number | string | null>((r) =>
      this.child.once('exit', (code, sig) => r(code ?? sig)),
    );
    this.child.kill(signal);
    const t = setTimeout(() => this.child.kill('SIGKILL'), ms);
    try {
      return await exit;
    } finally {
      clearTimeout(t);
    }
  }
}

/** Polls `fn` until it returns a value other than undefined. */
export async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 120_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`soak: timed out after ${ms / 1000} s waiting for ${what}`);
    await sleep(200);
  }
}

/** How often `pattern` appears in what `procs` printed so far (a refused write, a failing store). */
export function printed(procs: readonly { log(): string }[], pattern: RegExp): number {
  let n = 0;
  for (const p of procs) n += p.log().match(new RegExp(pattern.source, 'g'))?.length ?? 0;
  return n;
}

/**
 * Waits until `count` grows past its value now (a fault met a write), at most `ms`: a fault that
 * no write meets tests nothing, so faults hold until one does. Resolves whether it grew.
 */
export async function untilMet(count: () => number, ms = 30_000): Promise<boolean> {
  const before = count();
  // `<=`: a process's kept output is its last 256 KiB, so a count can also drop as it rolls.
  for (let waited = 0; count() <= before && waited < ms; waited += 250) await sleep(250);
  return count() > before;
}

/** GET url as JSON (any status); undefined while nothing answers. */
export async function getJson(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  const text = await res.text();
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(text);
  } catch {
    body = { text };
  }
  return { status: res.status, body };
}

/** Waits until something answers HTTP at `url` (any status). */
export function answering(url: string, ms = 120_000): Promise<true> {
  return until(`${url} to answer`, async () => ((await getJson(url)) ? true : undefined), ms);
}

/** The chDB engine behind ClickHouse's HTTP interface, as its own process (one data folder each). */
export async function startChdbServer(dir: string, port: number): Promise<Proc> {
  const p = new Proc('store', process.execPath, [
    '--import',
    'tsx',
    CHDB_HTTP,
    '--path',
    dir,
    '--port',
    String(port),
  ]);
  await until('the chDB HTTP store', async () =>
    (await fetch(`http://127.0.0.1:${port}/ping`)).ok ? true : undefined,
  );
  return p;
}

export interface Broker {
  brokers: string;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** The real broker (deploy/kafka/kafka.sh) on a free port pair, its state under `dir`. */
export async function kafkaBroker(dir: string): Promise<Broker> {
  let port = await freePort();
  while (port > 65000) port = await freePort();
  const env = { ...process.env, KAFKA_PORT: String(port), KAFKA_STATE: dir };
  const b: Broker = {
    brokers: `127.0.0.1:${port}`,
    async start() {
      await run('bash', [KAFKA, 'start'], { env, timeout: 300_000 });
    },
    async stop() {
      await run('bash', [KAFKA, 'stop'], { env, timeout: 120_000 });
    },
  };
  return b;
}

/** Runs a shell command, throwing with its stderr on failure. */
export async function sh(cmd: string): Promise<string> {
  const { stdout } = await run('bash', ['-c', cmd], { timeout: 120_000 });
  return stdout;
}

/** Kills what a path started and keeps each one's output in DIR/NAME.log. */
export async function stopAll(procs: Proc[], dir: string): Promise<void> {
  for (const p of procs) {
    await p.stop('SIGKILL', 5_000).catch(() => {});
    p.save(dir);
  }
}
