/**
 * collect → Kafka → two `rankwatch detect` processes in one group → one ClickHouse-protocol store
 * (chDB behind the HTTP interface), while the harness SIGKILLs a detect, stops the broker, fills
 * the store's disk and takes the store down (each of the last two until a write has met it).
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Accounting, account, replayFindings } from './account.js';
import { caughtUp } from './caught-up.js';
import { type CollectorDrops, collectorDrops, quiet, startCollector, stopEach } from './collector.js';
import { Disk, spaceRefusals } from './disk.js';
import { type Fault, faultsRun, feedCollector } from './feed.js';
import type { SoakPathOptions } from './input.js';
import {
  freePort,
  kafkaBroker,
  Proc,
  printed,
  sleep,
  startChdbServer,
  stopAll,
  until,
  untilMet,
} from './procs.js';

/**
 * What every Kafka soak path needs: the collector's spool, a broker, the job's topic and group, free
 * ports for the store and the collector, and the `detect` arguments every detect process shares.
 */
export async function kafkaSoakSetup(dir: string, job: string) {
  const spool = join(dir, 'collector-spool');
  mkdirSync(spool, { recursive: true });
  const storePort = await freePort();
  const broker = await kafkaBroker(join(dir, 'kafka'));
  const topic = `soak.${job}`;
  const group = `soak-${job}`;
  const storeUrl = `http://127.0.0.1:${storePort}`;
  return {
    spool,
    broker,
    topic,
    group,
    storePort,
    colPort: await freePort(),
    storeUrl,
    /** `detect` plus the options every detect process of a soak path takes; callers add their own. */
    detectArgs: (...extra: string[]) => [
      'detect',
      '--brokers',
      broker.brokers,
      '--topic',
      topic,
      '--partitions',
      '4',
      '--group',
      group,
      '--dead-letter-topic',
      `${topic}.dlq`,
      '--clickhouse-url',
      storeUrl,
      '--stats-interval',
      '0',
      // After the broker stop the group is back about one session timeout later (docs/kafka.md):
      // 10 s instead of 30 leaves the faults after it a detect to meet in a short run.
      '--session-timeout-ms',
      '10000',
      ...extra,
    ],
  };
}

export async function kafkaPath(o: SoakPathOptions): Promise<Accounting> {
  const disk = new Disk(o.dir, 'store-data');
  const diskFaults = await disk.mount(1024);
  const { spool, broker, topic, group, storePort, colPort, storeUrl, detectArgs } = await kafkaSoakSetup(
    o.dir,
    o.input.job,
  );
  const procs: Proc[] = [];
  let store: Proc | undefined;
  const detects: (Proc | undefined)[] = [undefined, undefined];
  const drops: CollectorDrops = { refusedByBus: 0, other: {} };

  const startStore = async () => {
    store = await startChdbServer(disk.dir, storePort);
    procs.push(store);
  };
  const startDetect = (i: number) => {
    const p = Proc.cli(`detect-${i}`, detectArgs());
    detects[i] = p;
    procs.push(p);
  };

  try {
    o.log('starting the Kafka broker');
    await broker.start();
    await startStore();
    startDetect(0);
    startDetect(1);
    const col = await startCollector(`kafka://${broker.brokers}/${topic}`, spool, colPort);
    procs.push(col);
    const faults: Fault[] = [
      {
        at: 0.15,
        name: 'SIGKILL one detect, restart it after 3 s',
        run: async () => {
          await detects[0]?.stop('SIGKILL');
          await sleep(3_000);
          startDetect(0);
        },
      },
      {
        at: 0.35,
        name: 'stop the broker for 10 s',
        run: async () => {
          await broker.stop();
          await sleep(10_000);
          await broker.start();
        },
      },
      {
        at: 0.8,
        name: 'the store down (process killed) until a detect write fails, then 5 s more',
        run: async () => {
          // A write held by the pipeline ("store failing"), or the transport's own read or write of
          // the delivery ranges it keeps in the store ("… is unreachable").
          const met = untilMet(() => printed(procs, /store failing|is unreachable/));
          await store?.stop('SIGKILL');
          const wasMet = await met;
          await sleep(5_000);
          await startStore();
          return wasMet ? undefined : 'no write met it';
        },
      },
    ];
    // First: later, the broker stop can leave detect without a bus for most of a short run, and
    // a disk fault no write meets tests nothing.
    if (diskFaults) faults.push(disk.fullFor(0.02, 6_000, () => spaceRefusals(procs)));
    const fed = await feedCollector({ lines: o.input.fed, colPort, seconds: o.seconds, faults, log: o.log });
    o.log(`fed ${fed.accepted} accepted, ${fed.rejected} rejected; waiting for the group to catch up`);
    await quiet(colPort, `${storeUrl}/ping`);
    await until('the detect group to commit every message', async () =>
      (await caughtUp([broker.brokers], group, topic)) ? true : undefined,
    );
    await collectorDrops(colPort, drops);
    await col.stop('SIGTERM');
    await stopEach(detects, o.log);
    const replay = await replayFindings(o.input, [], o.dir);
    return await account({
      path: 'collect → Kafka → 2 × detect (ClickHouse protocol over chDB)',
      url: storeUrl,
      input: o.input,
      refusedAtIngest: fed.rejected,
      drops,
      replay,
      faults: faultsRun(fed.faults, diskFaults),
    });
  } finally {
    await stopAll(procs, o.dir);
    await broker.stop().catch(() => {});
    await disk.unmount();
  }
}
