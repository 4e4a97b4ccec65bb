/** Shared by the Kafka suites: the broker from the global setup, random topic names, cleanup. */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AssignerProtocol, Kafka, logLevel, Partitioners } from 'kafkajs';
import { afterAll, inject } from 'vitest';
import type { Finding } from '../schema/finding.js';
import { KAFKA_SCRIPT } from './setup/kafka.js';
import { freePortPair } from './setup/ports.js';

const runFile = promisify(execFile);

export const brokers = (): string[] => inject('kafkaBrokers').split(',').filter(Boolean);

/** Topic and group names no other test (or earlier run) uses. */
export function names(prefix: string) {
  const id = `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
  return { topic: `rw-test.${id}`, deadLetterTopic: `rw-test.${id}.dlq`, group: `rw-test-${id}` };
}

export async function deleteTopics(brokerList: string[], topics: string[]): Promise<void> {
  if (process.env.KEEP_UP === '1') return;
  const admin = new Kafka({ brokers: brokerList, logLevel: logLevel.NOTHING }).admin();
  try {
    await admin.connect();
    const existing = new Set(await admin.listTopics());
    const gone = topics.filter((t) => existing.has(t));
    if (gone.length) await admin.deleteTopics({ topics: gone, timeout: 30_000 });
  } finally {
    await admin.disconnect();
  }
}

/** Reads every message of a topic from the start (a throwaway group), until `until` says enough. */
export async function readTopic(
  brokerList: string[],
  topic: string,
  until: (n: number) => boolean,
  ms = 60_000,
): Promise<{ key: string; value: string; headers: Record<string, string> }[]> {
  const kafka = new Kafka({ brokers: brokerList, logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({
    groupId: `rw-reader-${randomBytes(4).toString('hex')}`,
    maxWaitTimeInMs: 200,
  });
  const out: { key: string; value: string; headers: Record<string, string> }[] = [];
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ message }) => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(message.headers ?? {})) headers[k] = String(v);
      out.push({ key: message.key?.toString() ?? '', value: message.value?.toString() ?? '', headers });
    },
  });
  await waitFor(() => until(out.length), ms);
  await consumer.disconnect();
  return out;
}

/** Every finding event a findings file (`detect --findings`) holds so far; none before it exists. */
export function readFindings(file: string): Finding[] {
  try {
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Finding);
  } catch {
    return [];
  }
}

export async function waitFor(
  check: () => boolean | Promise<boolean>,
  ms = 60_000,
  what = 'condition',
): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const ROOT = join(import.meta.dirname, '..');

/** A `rankwatch` command as its own process (sources through tsx, so no build is needed). */
export function rankwatch(
  args: string[],
  env: Record<string, string> = {},
): ChildProcess & { log: () => string } {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'cli', 'main.ts'), ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout?.on('data', (b) => {
    log += b;
  });
  child.stderr?.on('data', (b) => {
    log += b;
  });
  return Object.assign(child, { log: () => log });
}

export function exited(child: ChildProcess, ms = 60_000): Promise<number | string | null> {
  if (child.exitCode !== null || child.signalCode !== null)
    return Promise.resolve(child.exitCode ?? child.signalCode);
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`process ${child.pid} did not exit within ${ms} ms`)), ms);
    child.once('exit', (code, signal) => {
      clearTimeout(t);
      resolve(code ?? signal);
    });
  });
}

export interface StoreDump {
  events: string[];
  findings: { id: string; state: string; type: string; ts: string }[];
  deadLetters: string[];
}

export async function dumpStore(dir: string): Promise<StoreDump> {
  const { stdout } = await runFile(
    process.execPath,
    ['--import', 'tsx', join(ROOT, 'tests', 'kafka-store-dump.ts'), dir],
    {
      cwd: ROOT,
      maxBuffer: 256 << 20,
    },
  );
  return JSON.parse(stdout) as StoreDump;
}

/** Partition kafkajs' default partitioner (murmur2, as the Java client) gives a key. */
export function partitionOfKey(key: string, partitions: number): number {
  const partitioner = Partitioners.DefaultPartitioner();
  return partitioner({
    topic: 't',
    partitionMetadata: Array.from({ length: partitions }, (_, i) => ({
      partitionId: i,
      leader: 0,
      partitionErrorCode: 0,
      replicas: [0],
      isr: [0],
    })),
    message: { key, value: null },
  });
}

export { caughtUp } from '../soak/caught-up.js';

/** Members of a group and the partitions each holds, by client id. */
export async function groupMembers(
  brokerList: string[],
  group: string,
): Promise<{ clientId: string; partitions: number[] }[]> {
  const admin = new Kafka({ brokers: brokerList, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    const { groups } = await admin.describeGroups([group]);
    if (groups[0]?.state !== 'Stable') return [];
    return groups[0].members.map((m) => {
      const a = AssignerProtocol.MemberAssignment.decode(m.memberAssignment);
      return { clientId: m.clientId, partitions: Object.values(a?.assignment ?? {}).flat() };
    });
  } finally {
    await admin.disconnect();
  }
}

/**
 * A test file's scratch folder, the topics it creates and the processes it starts: all removed
 * (processes SIGKILLed) after its tests. A file's own `afterAll` registered after this call runs
 * before this cleanup (vitest runs them in reverse), so a store or server in `dir` closes there.
 */
export function kafkaTestScope(prefix: string): {
  dir: string;
  topics: string[];
  children: ReturnType<typeof rankwatch>[];
} {
  const scope = {
    dir: mkdtempSync(join(tmpdir(), prefix)),
    topics: [] as string[],
    children: [] as ReturnType<typeof rankwatch>[],
  };
  afterAll(async () => {
    for (const c of scope.children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    if (brokers().length) await deleteTopics(brokers(), scope.topics);
    rmSync(scope.dir, { recursive: true, force: true });
  });
  return scope;
}

/**
 * A broker of the file's own (another port, its data in `dir`), for tests that stop and start it
 * while the shared broker stays up for the others. Stopped after the file's tests, before a
 * kafkaTestScope made earlier removes `dir`.
 */
export async function ownBroker(dir: string, preferredPort: number) {
  const port = await freePortPair(preferredPort);
  const env = { ...process.env, KAFKA_PORT: String(port), KAFKA_STATE: join(dir, 'broker') };
  const script = async (cmd: 'start' | 'stop') => {
    await runFile('bash', [KAFKA_SCRIPT, cmd], { env, timeout: 300_000 });
  };
  afterAll(() => script('stop').catch(() => {}));
  return { address: [`127.0.0.1:${port}`], start: () => script('start'), stop: () => script('stop') };
}
