/**
 * Prints what one chDB folder holds, as JSON, for the Kafka suites: chDB opens one data folder
 * per process, so each detect instance's store is read in a process of its own.
 *   node --import tsx tests/kafka-store-dump.ts DIR
 */
import { ChdbStore } from '../store/chdb.js';

const store = new ChdbStore({ path: process.argv[2] });
const events = await store.query<{ k: string }>(
  `SELECT concat(kind, '|', job, '|', host, '|', toString(toUnixTimestamp64Milli(ts)), '|', toString(cityHash64(raw))) AS k FROM raw_events`,
);
const findings = await store.query<{ id: string; state: string; type: string; ts: string }>(
  `SELECT id, state, type, toString(toUnixTimestamp64Milli(ts)) AS ts FROM findings FINAL`,
);
const dead = await store.query<{ reason: string }>('SELECT reason FROM dead_letters FINAL');
await store.close();
process.stdout.write(
  JSON.stringify({ events: events.map((e) => e.k), findings, deadLetters: dead.map((d) => d.reason) }),
);
