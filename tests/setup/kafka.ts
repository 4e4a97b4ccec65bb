/**
 * Starts the real Kafka broker (deploy/kafka/kafka.sh) once per test run and provides its address
 * as `inject('kafkaBrokers')`. Runs filtered to other files (`vitest run store`) start nothing.
 * KEEP_UP=1 leaves the broker running afterwards; RANKWATCH_KAFKA_BROKERS uses a broker that is
 * already running instead.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { TestProject } from 'vitest/node';
import { freePortPair } from './ports.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Bootstrap address of the test broker, or '' when this run needs none. */
    kafkaBrokers: string;
  }
}

const run = promisify(execFile);
export const KAFKA_SCRIPT = join(import.meta.dirname, '..', '..', 'deploy', 'kafka', 'kafka.sh');

export default async function setup(project: TestProject): Promise<(() => Promise<void>) | undefined> {
  const filters = (project as unknown as { vitest?: { filenamePattern?: string[] } }).vitest?.filenamePattern;
  if (filters?.length && !filters.some((f) => /kafka/i.test(f))) {
    project.provide('kafkaBrokers', '');
    return undefined;
  }
  const given = process.env.RANKWATCH_KAFKA_BROKERS;
  if (given) {
    project.provide('kafkaBrokers', given);
    return undefined;
  }
  const started = Date.now();
  // A broker this checkout left up (KEEP_UP=1) is used and stays up afterwards too.
  const wasUp = await run('bash', [KAFKA_SCRIPT, 'status']).then(
    () => true,
    () => false,
  );
  // Otherwise 19092, unless another process holds it (e.g. a broker of another checkout).
  const env = wasUp ? process.env : { ...process.env, KAFKA_PORT: String(await freePortPair(19092)) };
  const { stdout } = await run('bash', [KAFKA_SCRIPT, 'start'], { env, timeout: 300_000 }).catch((err) => {
    throw new Error(
      `could not start the test Kafka broker with ${KAFKA_SCRIPT}: ${(err as { stderr?: string }).stderr ?? err}`,
    );
  });
  const brokers = stdout.trim().split('\n').at(-1) ?? '';
  process.stderr.write(
    `kafka: broker at ${brokers} (ready in ${((Date.now() - started) / 1000).toFixed(1)} s)\n`,
  );
  project.provide('kafkaBrokers', brokers);
  return async () => {
    if (process.env.KEEP_UP === '1' || wasUp) return;
    await run('bash', [KAFKA_SCRIPT, 'stop'], { env, timeout: 60_000 });
  };
}
