/**
 * The sharded layout on a real broker (docs/operations.md, "Capacity"): one small job per
 * simulated fault family, keyed by host group the way collectors key them (`--host-group-size`),
 * read by 2 and by 4 `detect --stage shard` processes, each layout with its `detect --stage job`.
 * What each layout finds (the shards' GPU findings and the job stage's) equals `rankwatch replay`
 * of the same events: the same incidents, by id, type, host, GPU and onset.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { FAMILY_FAULTS, SHARDED_APART } from '../sim/fault-families.js';
import { parseFault } from '../sim/faults.js';
import { HostGroupKeys } from '../stream/host-groups.js';
import { KafkaTransport } from '../stream/kafka.js';
import { brokers, caughtUp, exited, kafkaTestScope, names, rankwatch, waitFor } from './kafka-helpers.js';

const { dir, topics, children } = kafkaTestScope('rankwatch-kafka-sharded-');

const PARTITIONS = 4;

/** Every finding event a findings file holds. */
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

/** Each incident once; a hang's without its onset (up to a step apart: onsets, below). */
const incidents = (fs: Finding[]) =>
  [
    ...new Set(
      fs.map((f) =>
        SHARDED_APART.some((fam) => f.job === `fam-${fam}`)
          ? `${f.job} ${f.id} ${f.type} ${f.host} ${f.gpu ?? '-'}`
          : `${f.job} ${f.id} ${f.type} ${f.host} ${f.gpu ?? '-'} ${f.onset_ts ?? '-'}`,
      ),
    ),
  ].sort();

/** A hang's onset by id: the sharded job stage reads it from other sources than replay. */
const onsets = (fs: Finding[]) =>
  new Map(
    fs
      .filter((f) => SHARDED_APART.some((fam) => f.job === `fam-${fam}`) && f.onset_ts !== undefined)
      .map((f) => [f.id, f.onset_ts!]),
  );

describe.skipIf(brokers().length === 0)('the sharded layout on Kafka', () => {
  it('2 and 4 shards plus a job stage find what replay finds, for every fault family', async () => {
    // Event time near now: the store drops raw events older than its TTL.
    const startTs = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000;
    // Each job on hosts of its own: one GPU in two jobs at once is no real fleet's.
    const events: RankwatchEvent[] = Object.entries(FAMILY_FAULTS).flatMap(([family, fault], i) =>
      [
        ...new ClusterSim({
          job: `fam-${family}`,
          ranks: 32,
          steps: 100,
          seed: 5,
          startTs,
          faults: [parseFault(fault)],
        }).events(),
      ].map((e) => JSON.parse(JSON.stringify(e).replace(/"gpu-(\d{4})"/g, `"f${i}-$1"`)) as RankwatchEvent),
    );
    const file = join(dir, 'families.jsonl');
    writeFileSync(file, `${events.map((e) => JSON.stringify(e)).join('\n')}\n`);
    const replayed = join(dir, 'replay.findings.jsonl');
    const r = rankwatch(['replay', file, '--findings', replayed, '--quiet']);
    expect(await exited(r, 180_000)).toBe(0);
    const want = incidents(read(replayed));
    for (const family of Object.keys(FAMILY_FAULTS))
      expect(want.some((k) => k.startsWith(`fam-${family} `))).toBe(true);

    // Collectors' keys: one host per group, so 4 groups a job over the shards.
    const n = names('sharded');
    const shardTopic = `${n.topic}.shards`;
    topics.push(n.topic, shardTopic, n.deadLetterTopic);
    const t = new KafkaTransport({ brokers: brokers(), ...n, shardTopic, partitions: PARTITIONS });
    const keys = new HostGroupKeys({ groupHosts: 1 });
    for (let i = 0; i < events.length; i += 4096) await t.publish(keys.batch(events.slice(i, i + 4096)));
    await t.stop();

    const layouts = [2, 4].map((shards) => {
      const group = `${n.group}-${shards}`;
      const records = `${n.topic}.records-${shards}`;
      topics.push(records);
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
        group,
        '--client-id',
        id,
        '--partitions',
        String(PARTITIONS),
        '--data',
        join(dir, `${group}-${id}`),
        '--findings',
        join(dir, `${group}-${id}.findings.jsonl`),
        '--no-events',
        '--stats-interval',
        '0',
        // A shard sends the steps it holds once its input goes quiet.
        '--idle-advance-s',
        '2',
      ];
      const ids = ['job', ...Array.from({ length: shards }, (_, i) => `shard${i}`)];
      const procs = ids.map((id) => rankwatch(args(id === 'job' ? 'job' : 'shard', id)));
      children.push(...procs);
      return { shards, group, records, ids, procs };
    });

    for (const l of layouts) {
      const found = () =>
        incidents(l.ids.flatMap((id) => read(join(dir, `${l.group}-${id}.findings.jsonl`))));
      // On a timeout the comparison below shows what is missing.
      await waitFor(() => found().length >= want.length, 180_000).catch(() => {});
      await waitFor(() => caughtUp(brokers(), `${l.group}.shards`, shardTopic), 60_000, 'shards caught up');
      await waitFor(() => caughtUp(brokers(), l.group, n.topic), 60_000, 'job stage caught up');
      expect(found(), `${l.shards} shards`).toEqual(want);
      const got = onsets(l.ids.flatMap((id) => read(join(dir, `${l.group}-${id}.findings.jsonl`))));
      for (const [id, ts] of onsets(read(replayed)))
        expect(Math.abs((got.get(id) ?? Number.NaN) - ts), `${id} onset`).toBeLessThan(1200);
    }
    for (const l of layouts) for (const p of l.procs) p.kill('SIGTERM');
    for (const l of layouts) for (const p of l.procs) expect(await exited(p, 60_000)).toBe(0);
  }, 600_000);
});
