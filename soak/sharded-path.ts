/**
 * The sharded layout (docs/operations.md, "Capacity"): collect (keying GPU samples and collectives
 * by host group, `--host-group-size 1`) → Kafka → two `detect --stage shard` and one
 * `detect --stage job` → one ClickHouse-protocol store (chDB behind the HTTP interface), while the
 * harness SIGKILLs a shard mid-stream and restarts it: its partitions move to the other shard,
 * which replays them, then some move back. With `killJobStage` it also SIGKILLs the job stage
 * while it holds events for its shards and restarts it: the events topic was committed no further
 * than the lowest held event, so the restarted one handles them live (docs/kafka.md, "A job stage
 * killed or moved"). Nothing lost or doubled; the same incidents as replay.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Accounting, account, incidentsOnly, replayFindings } from './account.js';
import { caughtUp } from './caught-up.js';
import { type CollectorDrops, collectorDrops, quiet, startCollector, stopEach } from './collector.js';
import { type Fault, faultsRun, feedCollector } from './feed.js';
import type { SoakPathOptions } from './input.js';
import { kafkaSoakSetup } from './kafka-path.js';
import { Proc, sleep, startChdbServer, stopAll, until } from './procs.js';

export async function shardedPath(o: SoakPathOptions): Promise<Accounting> {
  const data = join(o.dir, 'store-data');
  mkdirSync(data, { recursive: true });
  const { spool, broker, topic, group, storePort, colPort, storeUrl, detectArgs } = await kafkaSoakSetup(
    o.dir,
    o.input.job,
  );
  const procs: Proc[] = [];
  const shards: (Proc | undefined)[] = [undefined, undefined];
  let jobStage: Proc | undefined;
  const drops: CollectorDrops = { refusedByBus: 0, other: {} };
  const start = (name: string, stage: 'shard' | 'job') => {
    const p = Proc.cli(
      name,
      detectArgs(
        '--stage',
        stage,
        '--shard-topic',
        `${topic}.shards`,
        '--shard-records-topic',
        `${topic}.records`,
        '--client-id',
        name,
        // The shards send a step's records once a later step comes, or once their input is idle:
        // 2 s fires mid-publish too, sending steps in parts, which must change no finding
        // (docs/kafka.md, "A step sent in parts"), and the last steps go out soon.
        '--idle-advance-s',
        '2',
      ),
    );
    procs.push(p);
    return p;
  };

  try {
    o.log('starting the Kafka broker');
    await broker.start();
    procs.push(await startChdbServer(data, storePort));
    jobStage = start('job', 'job');
    shards[0] = start('shard-0', 'shard');
    shards[1] = start('shard-1', 'shard');
    const col = await startCollector(
      `kafka://${broker.brokers}/${topic}`,
      spool,
      colPort,
      ['--host-group-size', '1'],
      {
        ...process.env,
        RANKWATCH_KAFKA_SHARD_TOPIC: `${topic}.shards`,
        // Whoever creates the events topic, it has the records topic's partitions (a job stage checks).
        RANKWATCH_KAFKA_PARTITIONS: '4',
      },
    );
    procs.push(col);
    const faults: Fault[] = [
      {
        at: 0.3,
        name: 'SIGKILL a shard (`detect --stage shard`), restart it after 3 s',
        run: async () => {
          await shards[0]?.stop('SIGKILL');
          await sleep(3_000);
          shards[0] = start('shard-0', 'shard');
        },
      },
      ...(o.killJobStage
        ? [
            {
              at: 0.6,
              name: 'SIGKILL the job stage (`detect --stage job`) while it holds events, restart it after 3 s',
              run: async () => {
                await jobStage?.stop('SIGKILL');
                await sleep(3_000);
                jobStage = start('job', 'job');
              },
            },
          ]
        : []),
    ];
    const fed = await feedCollector({ lines: o.input.fed, colPort, seconds: o.seconds, faults, log: o.log });
    o.log(`fed ${fed.accepted} accepted, ${fed.rejected} rejected; waiting for every stage to catch up`);
    await quiet(colPort, `${storeUrl}/ping`);
    for (const [g, t] of [
      [`${group}.shards`, `${topic}.shards`],
      [group, topic],
      [`${group}.records`, `${topic}.records`],
    ])
      await until(`${g} to commit every message`, async () =>
        (await caughtUp([broker.brokers], g, t)) ? true : undefined,
      );
    // The shards' last steps go out once their input is idle; then the job stage takes them.
    await sleep(5_000);
    await until('the job stage to take the last records', async () =>
      (await caughtUp([broker.brokers], `${group}.records`, `${topic}.records`)) ? true : undefined,
    );
    await collectorDrops(colPort, drops);
    await col.stop('SIGTERM');
    await stopEach([...shards, jobStage], o.log);
    const replay = await replayFindings(o.input, [], o.dir);
    return await account({
      path: 'collect (host-group keys) → Kafka → 2 × detect --stage shard + detect --stage job (ClickHouse protocol over chDB)',
      url: storeUrl,
      input: o.input,
      refusedAtIngest: fed.rejected,
      drops,
      replay,
      faults: faultsRun(fed.faults, false),
      findingKeys: incidentsOnly,
    });
  } finally {
    await stopAll(procs, o.dir);
    await broker.stop().catch(() => {});
  }
}
