/**
 * A job stage SIGKILLed mid-stream (docs/kafka.md, "A job stage killed or moved"): it holds a
 * sharded job's events until the shards' records say their steps are complete, so the events
 * topic is committed no further than the lowest held event. Killed while holding, the next job
 * stage handles the held events live: lost 0, doubled 0 in its store, and the incidents of shards
 * and both job stages equal `rankwatch replay` of the same events. The kill lands before the
 * faults begin (step 30), so every incident comes from events the killed one read and held.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { FAMILY_FAULTS } from '../sim/fault-families.js';
import { parseFault } from '../sim/faults.js';
import { ChdbStore } from '../store/chdb.js';
import { HostGroupKeys, parseShardKey } from '../stream/host-groups.js';
import { KafkaTransport } from '../stream/kafka.js';
import {
  brokers,
  caughtUp,
  exited,
  groupMembers,
  kafkaTestScope,
  names,
  rankwatch,
  waitFor,
} from './kafka-helpers.js';

const { dir, topics, children } = kafkaTestScope('rankwatch-kafka-jobstage-kill-');

const PARTITIONS = 2;
/** Families the job stage judges (slow links, stragglers) and one a shard finds (throttle). */
const FAMILIES = ['nic', 'link', 'slow_rank', 'throttle'] as const;

const read = (file: string): Finding[] => {
  try {
    return readFileSync(file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Finding);
  } catch {
    return [];
  }
};

const incidents = (fs: Finding[]) =>
  [
    ...new Set(fs.map((f) => `${f.job} ${f.id} ${f.type} ${f.host} ${f.gpu ?? '-'} ${f.onset_ts ?? '-'}`)),
  ].sort();

describe.skipIf(brokers().length === 0)('a job stage killed mid-stream', () => {
  it('loses and doubles nothing: the next one handles what it held, and finds what replay finds', async () => {
    const startTs = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000;
    const events: RankwatchEvent[] = FAMILIES.flatMap((family, i) =>
      [
        ...new ClusterSim({
          job: `kill-${family}`,
          ranks: 32,
          steps: 100,
          seed: 7,
          startTs,
          faults: [parseFault(FAMILY_FAULTS[family])],
        }).events(),
      ].map((e) => JSON.parse(JSON.stringify(e).replace(/"gpu-(\d{4})"/g, `"k${i}-$1"`)) as RankwatchEvent),
    );
    const file = join(dir, 'input.jsonl');
    writeFileSync(file, `${events.map((e) => JSON.stringify(e)).join('\n')}\n`);
    const replayed = join(dir, 'replay.findings.jsonl');
    expect(await exited(rankwatch(['replay', file, '--findings', replayed, '--quiet']), 180_000)).toBe(0);
    const want = incidents(read(replayed));
    for (const family of FAMILIES) expect(want.some((k) => k.startsWith(`kill-${family} `))).toBe(true);

    const n = names('jobstage-kill');
    const shardTopic = `${n.topic}.shards`;
    const records = `${n.topic}.records`;
    topics.push(n.topic, shardTopic, records, n.deadLetterTopic);
    const args = (stage: string, id: string) => [
      'detect',
      '--stage',
      stage,
      '--brokers',
      brokers().join(','),
      '--topic',
      n.topic,
      '--shard-topic',
      shardTopic,
      '--shard-records-topic',
      records,
      '--dead-letter-topic',
      n.deadLetterTopic,
      '--group',
      n.group,
      '--client-id',
      id,
      '--partitions',
      String(PARTITIONS),
      // The two job stages share one store, as a restarted process does.
      '--data',
      join(dir, stage === 'job' ? 'job' : id),
      '--findings',
      join(dir, `${id}.findings.jsonl`),
      '--stats-interval',
      '0',
      '--idle-advance-s',
      '5',
      '--shard-hold-s',
      '600',
    ];
    const start = (stage: string, id: string) => {
      const p = rankwatch(args(stage, id));
      children.push(p);
      return p;
    };
    const settled = async (group: string, members: number) =>
      (await groupMembers(brokers(), group)).length === members;

    const t = new KafkaTransport({ brokers: brokers(), ...n, shardTopic, partitions: PARTITIONS });
    const batches = new HostGroupKeys({ groupHosts: 1 }).batch(events, 2048);
    const jobKeyed = batches.filter((b) => !parseShardKey(b.key));
    // The host-group events up to step 20 now, the rest once the first job stage is dead.
    const cut = Math.min(...events.filter((e) => e.kind === 'step' && e.step === 20).map((e) => e.ts));
    const early = (e: unknown) => (e as RankwatchEvent).ts < cut;
    const grouped = batches.filter((b) => parseShardKey(b.key));
    const first = grouped
      .map((b) => ({ ...b, events: b.events.filter(early) }))
      .filter((b) => b.events.length);
    const rest = grouped
      .map((b) => ({ ...b, events: b.events.filter((e) => !early(e)) }))
      .filter((b) => b.events.length);
    await t.publish(jobKeyed);

    const job0 = start('job', 'job0');
    await waitFor(
      async () => (await settled(n.group, 1)) && (await settled(`${n.group}.records`, 1)),
      180_000,
      'job stage settled',
    );
    const shards = [start('shard', 'shard0'), start('shard', 'shard1')];
    await waitFor(() => settled(`${n.group}.shards`, 2), 180_000, 'shards settled');
    await t.publish(first);
    await waitFor(() => caughtUp(brokers(), `${n.group}.shards`, shardTopic), 120_000, 'shards caught up');
    // The shards' last steps go out once their input is idle (5 s); then the job stage takes them.
    await new Promise((r) => setTimeout(r, 8_000));
    await waitFor(() => caughtUp(brokers(), `${n.group}.records`, records), 120_000, 'records read');
    // It read every event, and holds those past step 20: the events topic is not committed to its end.
    expect(await caughtUp(brokers(), n.group, n.topic)).toBe(false);
    job0.kill('SIGKILL');
    await exited(job0, 30_000);

    // The rest goes through the shards while no job stage runs: the next one finds their records waiting.
    await t.publish(rest);
    await t.stop();
    await waitFor(() => caughtUp(brokers(), `${n.group}.shards`, shardTopic), 120_000, 'shards caught up');
    const job1 = start('job', 'job1');
    const ids = ['shard0', 'shard1', 'job0', 'job1'];
    const found = () => incidents(ids.flatMap((id) => read(join(dir, `${id}.findings.jsonl`))));
    await waitFor(() => found().length >= want.length, 240_000).catch(() => {});
    await waitFor(() => caughtUp(brokers(), n.group, n.topic), 120_000, 'job stage caught up');
    await waitFor(() => caughtUp(brokers(), `${n.group}.records`, records), 60_000, 'records caught up');
    expect(found()).toEqual(want);

    for (const p of [job1, ...shards]) p.kill('SIGTERM');
    for (const p of [job1, ...shards]) expect(await exited(p, 60_000)).toBe(0);

    // Lost 0, doubled 0: every job-keyed event once, every step once in the raw table and the rollup.
    const store = new ChdbStore({ path: join(dir, 'job') });
    try {
      const one = async (sql: string) => Number((await store.query<{ n: string }>(sql))[0]?.n ?? 0);
      const kept = new Set(jobKeyed.flatMap((b) => b.events.map((e) => JSON.stringify(e)))).size;
      const steps = events.filter((e) => e.kind === 'step').length;
      expect(await one('SELECT uniqExact(cityHash64(raw)) AS n FROM events')).toBe(kept);
      expect(await one('SELECT count() AS n FROM steps FINAL')).toBe(steps);
      expect(
        await one(
          'SELECT sum(c) AS n FROM (SELECT countMerge(rows) AS c FROM job_minute GROUP BY job, minute)',
        ),
      ).toBe(steps);
    } finally {
      await store.close();
    }
  }, 900_000);
});
