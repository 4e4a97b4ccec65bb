/**
 * The sharded layout on a real broker (docs/operations.md, "Capacity"): one small job per
 * simulated fault family, keyed by host group the way collectors key them (`--host-group-size`),
 * read by 2 `detect --stage shard` processes and one `detect --stage job`, and by 4 shards and two
 * job stages in one group (each holding the same partitions of the events and of the records).
 * What each layout finds (the shards' GPU findings and the job stages') equals `rankwatch replay`
 * of the same events: the same incidents, by id, type, host, GPU and onset. The shards join while
 * their input flows (host groups move mid-step) and flush on the default idle period, so steps go
 * out in parts (docs/kafka.md, "A step sent in parts"). Records of another
 * format, from a shard of another version, are refused with one warning and change nothing.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { FAMILY_FAULTS } from '../sim/fault-families.js';
import { parseFault } from '../sim/faults.js';
import { HostGroupKeys } from '../stream/host-groups.js';
import { KafkaTransport } from '../stream/kafka.js';
import {
  brokers,
  caughtUp,
  exited,
  groupMembers,
  kafkaTestScope,
  names,
  rankwatch,
  readFindings,
  waitFor,
} from './kafka-helpers.js';

const { dir, topics, children } = kafkaTestScope('rankwatch-kafka-sharded-');

const PARTITIONS = 4;

/** Each incident once. */
const incidents = (fs: Finding[]) =>
  [
    ...new Set(fs.map((f) => `${f.job} ${f.id} ${f.type} ${f.host} ${f.gpu ?? '-'} ${f.onset_ts ?? '-'}`)),
  ].sort();

/** Each hang as it opened: when (event time), on which rank, by which signs (the shards' signs make them replay's). */
const hangsOpened = (fs: Finding[]) =>
  fs
    .filter((f) => f.type === 'nccl_hang' && f.state === 'open')
    .map((f) => `${f.id} ${f.ts} ${f.rank} ${(f.evidence as { signals?: string[] }).signals}`)
    .sort();

describe.skipIf(brokers().length === 0)('the sharded layout on Kafka', () => {
  it('2 shards and a job stage, 4 shards and two job stages, find what replay finds, for every fault family', async () => {
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
    // In time order, as a fleet's collectors send them: one job after another, replay would judge
    // a later job's hang on the clock of the jobs before it (the hang detector sweeps on the stream's time).
    events.sort((a, b) => a.ts - b.ts);
    const file = join(dir, 'families.jsonl');
    writeFileSync(file, `${events.map((e) => JSON.stringify(e)).join('\n')}\n`);
    const replayed = join(dir, 'replay.findings.jsonl');
    const r = rankwatch(['replay', file, '--findings', replayed, '--quiet']);
    expect(await exited(r, 180_000)).toBe(0);
    const want = incidents(readFindings(replayed));
    for (const family of Object.keys(FAMILY_FAULTS))
      expect(want.some((k) => k.startsWith(`fam-${family} `))).toBe(true);

    // Collectors' keys: one host per group, so 4 groups a job over the shards.
    const n = names('sharded');
    const shardTopic = `${n.topic}.shards`;
    topics.push(n.topic, shardTopic, n.deadLetterTopic);

    // Every job's first half now (the job-keyed events whole), its second half once the first shard
    // of each layout has read the first: the other shards join then, and host groups move mid-step.
    const t = new KafkaTransport({ brokers: brokers(), ...n, shardTopic, partitions: PARTITIONS });
    const keys = new HostGroupKeys({ groupHosts: 1 });
    const mid = startTs + 50 * 1000;
    const first = keys.batch(
      events.filter((e) => e.ts < mid || (e.kind !== 'gpu' && e.kind !== 'collective')),
      4096,
    );
    const second = keys.batch(
      events.filter((e) => e.ts >= mid && (e.kind === 'gpu' || e.kind === 'collective')),
      4096,
    );

    // A shard of another version said a group is complete far ahead: refused, or steps go early.
    const foreignMark = { t: 'mark', format: 99, job: 'fam-nic', group: 0, through: 1e9, ts: startTs };
    for (const shards of [2, 4]) {
      const old = new KafkaTransport({
        brokers: brokers(),
        ...n,
        topic: `${n.topic}.records-${shards}`,
        partitions: PARTITIONS,
      });
      await old.publish([{ key: 'fam-nic', events: [foreignMark, foreignMark] }]);
      await old.stop();
    }
    // Two job stages in one group for the 4 shards: each gets half the jobs, events and records alike.
    const layouts = [
      [2, 1],
      [4, 2],
    ].map(([shards, jobStages]) => {
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
        // The job stages read the events before their shards start: held until the shards send.
        '--shard-hold-s',
        '600',
      ];
      const jobIds = Array.from({ length: jobStages }, (_, i) => `job${i}`);
      const shardIds = Array.from({ length: shards }, (_, i) => `shard${i}`);
      const procs = jobIds.map((id) => rankwatch(args('job', id)));
      children.push(...procs);
      const startShards = (ids: string[]) => {
        const more = ids.map((id) => rankwatch(args('shard', id)));
        children.push(...more);
        procs.push(...more);
      };
      return { shards, group, records, jobIds, shardIds, ids: [...jobIds, ...shardIds], procs, startShards };
    });
    // The job stages settle in their groups first: what is tested is the co-partitioned assignment
    // of settled job stages, not a job moving between them mid-stream (a job stage killed or
    // joined mid-stream: tests/kafka-sharded-jobstage-kill.int.test.ts). Shards join while their
    // input flows.
    const settled = async (group: string, members: number) =>
      (await groupMembers(brokers(), group)).length === members;
    for (const l of layouts)
      await waitFor(
        async () =>
          (await settled(l.group, l.jobIds.length)) && (await settled(`${l.group}.records`, l.jobIds.length)),
        180_000,
        'job stages settled',
      );
    for (const l of layouts) l.startShards(l.shardIds.slice(0, 1));
    await t.publish(first);
    for (const l of layouts)
      await waitFor(() => caughtUp(brokers(), `${l.group}.shards`, shardTopic), 180_000, 'first shard read');
    for (const l of layouts) l.startShards(l.shardIds.slice(1));
    await t.publish(second);
    await t.stop();

    for (const l of layouts) {
      const found = () =>
        incidents(l.ids.flatMap((id) => readFindings(join(dir, `${l.group}-${id}.findings.jsonl`))));
      // On a timeout the comparison below shows what is missing.
      await waitFor(() => found().length >= want.length, 180_000).catch(() => {});
      await waitFor(() => caughtUp(brokers(), `${l.group}.shards`, shardTopic), 60_000, 'shards caught up');
      // The records read to their end: committed, unless what they carry is still held (a job
      // stage commits only once what they produce is out: docs/kafka.md, "A job stage killed or
      // moved"; some events may wait up to --shard-hold-s, 600 s here), so waited for a while only.
      await waitFor(() => caughtUp(brokers(), `${l.group}.records`, l.records), 60_000).catch(() => {});
      expect(found(), `${l.shards} shards, ${l.jobIds.length} job stages`).toEqual(want);
      // Each job stage holds the same partitions of both topics, and each holds some.
      const held = async (group: string) =>
        new Map(
          (await groupMembers(brokers(), group)).map((m) => [m.clientId, m.partitions.sort((a, b) => a - b)]),
        );
      const events = await held(l.group);
      expect(events.size).toBe(l.jobIds.length);
      expect(await held(`${l.group}.records`)).toEqual(events);
      for (const ps of events.values()) expect(ps.length).toBeGreaterThan(0);
      // One line per job stage that read them (the first owner, and the one that replayed them).
      const refused = l.procs.slice(0, l.jobIds.length).map((p) =>
        p
          .log()
          .split('\n')
          .filter((line) => line.includes('format 99 from fam-nic/hostgroup-0 refused')),
      );
      expect(refused.flat().length).toBeGreaterThan(0);
      for (const lines of refused) expect(lines.length).toBeLessThanOrEqual(1);
      const opened = hangsOpened(
        l.ids.flatMap((id) => readFindings(join(dir, `${l.group}-${id}.findings.jsonl`))),
      );
      expect(opened, 'hangs opened').toEqual(hangsOpened(readFindings(replayed)));
    }
    for (const l of layouts) for (const p of l.procs) p.kill('SIGTERM');
    for (const l of layouts) for (const p of l.procs) expect(await exited(p, 60_000)).toBe(0);
  }, 600_000);

  it('a job stage whose two topics differ in partitions stops with one line saying which to change', async () => {
    const n = names('sharded-parts');
    const records = `${n.topic}.records`;
    topics.push(n.topic, records, n.deadLetterTopic);
    // The records topic made by hand, with fewer partitions than the events topic.
    const made = new KafkaTransport({ brokers: brokers(), ...n, topic: records, partitions: 2 });
    await made.ensureTopics();
    await made.stop();
    const p = rankwatch([
      'detect',
      '--stage',
      'job',
      '--brokers',
      brokers().join(','),
      '--topic',
      n.topic,
      '--shard-records-topic',
      records,
      '--dead-letter-topic',
      n.deadLetterTopic,
      '--group',
      n.group,
      '--partitions',
      String(PARTITIONS),
      '--data',
      join(dir, 'parts'),
    ]);
    children.push(p);
    expect(await exited(p, 120_000)).not.toBe(0);
    expect(p.log()).toContain(`topics ${n.topic} (4 partitions) and ${records} (2) differ`);
  }, 180_000);
});
