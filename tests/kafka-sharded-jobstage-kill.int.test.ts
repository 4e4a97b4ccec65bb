/**
 * A job stage SIGKILLed, or joined by a second one, mid-stream (docs/kafka.md, "A job stage
 * killed or moved"): it holds a sharded job's events until the shards' records say their steps are
 * complete, so the events topic is committed no further than the lowest held event. The next owner
 * of a job handles the held events live: lost 0, doubled 0 in the store, and the incidents of the
 * shards and the job stages equal `rankwatch replay` of the same events. The kill and the join land
 * before the faults begin (step 30), so every incident comes from events held at that moment.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
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
  readFindings,
  waitFor,
} from './kafka-helpers.js';

const { dir, topics, children } = kafkaTestScope('rankwatch-kafka-jobstage-kill-');

/** Two partitions: the four jobs fall on both (three on one), so a job stage that joins takes some. */
const PARTITIONS = 2;
/** Families the job stage judges (slow links, stragglers) and one a shard finds (throttle). */
const FAMILIES = ['nic', 'link', 'slow_rank', 'throttle'] as const;

const incidents = (fs: Finding[]) =>
  [
    ...new Set(fs.map((f) => `${f.job} ${f.id} ${f.type} ${f.host} ${f.gpu ?? '-'} ${f.onset_ts ?? '-'}`)),
  ].sort();

const settled = async (group: string, members: number) =>
  (await groupMembers(brokers(), group)).length === members;

/** The late steps a stopped process counted (its counters line at exit). */
const lateSteps = (p: ReturnType<typeof rankwatch>) =>
  Number(p.log().match(/"late_steps":(\d+)/)?.[1] ?? Number.NaN);

let events: RankwatchEvent[] = [];
let want: string[] = [];

/** Topics, a group and its processes; the job-keyed events, and the host-group ones in two parts. */
function layout(name: string) {
  const n = names(name);
  const shardTopic = `${n.topic}.shards`;
  const records = `${n.topic}.records`;
  topics.push(n.topic, shardTopic, records, n.deadLetterTopic);
  const ids: string[] = [];
  const procs: ReturnType<typeof rankwatch>[] = [];
  const start = (stage: 'job' | 'shard', id: string, store = id) => {
    ids.push(id);
    const p = rankwatch([
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
      '--data',
      join(dir, `${name}-${store}`),
      '--findings',
      join(dir, `${name}-${id}.findings.jsonl`),
      '--stats-interval',
      '0',
      '--idle-advance-s',
      '5',
      '--shard-hold-s',
      '600',
    ]);
    children.push(p);
    procs.push(p);
    return p;
  };
  const t = new KafkaTransport({ brokers: brokers(), ...n, shardTopic, partitions: PARTITIONS });
  const batches = new HostGroupKeys({ groupHosts: 1 }).batch(events, 2048);
  const jobKeyed = batches.filter((b) => !parseShardKey(b.key));
  // The host-group events up to step 20 first, the rest after the kill or the join.
  const cut = Math.min(...events.filter((e) => e.kind === 'step' && e.step === 20).map((e) => e.ts));
  const early = (e: unknown) => (e as RankwatchEvent).ts < cut;
  const grouped = batches.filter((b) => parseShardKey(b.key));
  const part = (keep: (e: unknown) => boolean) =>
    grouped.map((b) => ({ ...b, events: b.events.filter(keep) })).filter((b) => b.events.length);
  return {
    n,
    start,
    jobKeyed,
    /**
     * A job stage and two shards settled, the host-group events up to step 20 in; the job-keyed
     * `job` events not yet (their topic's consumer behind): the job stage holds what the shards
     * passed on, which waits for them.
     */
    async begin() {
      const job0 = start('job', 'job0', 'job');
      await waitFor(
        async () => (await settled(n.group, 1)) && (await settled(`${n.group}.records`, 1)),
        180_000,
        'job stage settled',
      );
      const shards = [start('shard', 'shard0'), start('shard', 'shard1')];
      await waitFor(() => settled(`${n.group}.shards`, 2), 180_000, 'shards settled');
      await t.publish(part(early));
      await waitFor(() => caughtUp(brokers(), `${n.group}.shards`, shardTopic), 120_000, 'shards caught up');
      // The shards' last records go out once their input is idle (5 s); then the job stage reads them.
      await new Promise((r) => setTimeout(r, 10_000));
      // It holds every event the shards passed on (none has its job event yet): the records topic is
      // not committed to its end.
      expect(await caughtUp(brokers(), `${n.group}.records`, records)).toBe(false);
      return { job0, shards };
    },
    async rest() {
      await t.publish(jobKeyed);
      await t.publish(part((e) => !early(e)));
      await t.stop();
      await waitFor(() => caughtUp(brokers(), `${n.group}.shards`, shardTopic), 120_000, 'shards caught up');
    },
    /** Every stage caught up; the incidents of all of them. */
    async found() {
      const all = () =>
        incidents(ids.flatMap((id) => readFindings(join(dir, `${name}-${id}.findings.jsonl`))));
      await waitFor(() => all().length >= want.length, 240_000).catch(() => {});
      await waitFor(() => caughtUp(brokers(), n.group, n.topic), 120_000, 'job stage caught up');
      // A job's last events (its `finished`) wait for every group's signs of their time, which stop
      // with the job: they go once event time is SIGNS_LAG_MS past them (30 s of an idle bus).
      await waitFor(() => caughtUp(brokers(), `${n.group}.records`, records), 120_000, 'records caught up');
      return all();
    },
    /**
     * The incidents equal replay's; if not, the processes are stopped first so the failure shows
     * each one's counters (late or duplicate steps, refused records) beside the difference.
     */
    async expectFound() {
      const got = await this.found();
      if (JSON.stringify(got) === JSON.stringify(want)) return;
      const live = procs.filter((p) => p.exitCode === null && p.signalCode === null);
      for (const p of live) p.kill('SIGTERM');
      await Promise.all(live.map((p) => exited(p, 60_000).catch(() => null)));
      const counters = procs.map((p, i) => `${ids[i]}: ${p.log().match(/counters=.*/)?.[0] ?? '(none)'}`);
      expect(got, `counters at stop:\n${counters.join('\n')}`).toEqual(want);
    },
  };
}

describe.skipIf(brokers().length === 0)('a job stage killed or joined mid-stream', () => {
  beforeAll(async () => {
    const startTs = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000;
    events = FAMILIES.flatMap((family, i) =>
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
    want = incidents(readFindings(replayed));
    for (const family of FAMILIES) expect(want.some((k) => k.startsWith(`kill-${family} `))).toBe(true);
  }, 240_000);

  it('killed: the next one handles what it held, loses and doubles nothing, and finds what replay finds', async () => {
    const l = layout('kill');
    const { job0, shards } = await l.begin();
    job0.kill('SIGKILL');
    await exited(job0, 30_000);
    // The rest goes through the shards while no job stage runs: the next one finds their records waiting.
    await l.rest();
    const job1 = l.start('job', 'job1', 'job'); // the same store, as a restarted process has
    await l.expectFound();
    for (const p of [job1, ...shards]) p.kill('SIGTERM');
    for (const p of [job1, ...shards]) expect(await exited(p, 60_000)).toBe(0);
    expect(lateSteps(job1)).toBe(0);

    // Lost 0, doubled 0: every job-keyed event once in the job stage's store; every step once in
    // the raw tables and the rollups of the shards that read them.
    const count = async (path: string, sql: string) => {
      const store = new ChdbStore({ path: join(dir, path) });
      try {
        return Number((await store.query<{ n: string }>(sql))[0]?.n ?? 0);
      } finally {
        await store.close();
      }
    };
    const kept = new Set(l.jobKeyed.flatMap((b) => b.events.map((e) => JSON.stringify(e)))).size;
    expect(await count('kill-job', 'SELECT uniqExact(cityHash64(raw)) AS n FROM events')).toBe(kept);
    const steps = events.filter((e) => e.kind === 'step').length;
    const inShards = async (sql: string) =>
      (await count('kill-shard0', sql)) + (await count('kill-shard1', sql));
    expect(await inShards('SELECT count() AS n FROM steps FINAL')).toBe(steps);
    expect(
      await inShards(
        'SELECT sum(c) AS n FROM (SELECT countMerge(rows) AS c FROM job_minute GROUP BY job, minute)',
      ),
    ).toBe(steps);
  }, 900_000);

  it('joined: the jobs that move go on at the new one from what the old one held, as replay finds', async () => {
    const l = layout('join');
    const { job0, shards } = await l.begin();
    const job1 = l.start('job', 'job1');
    await waitFor(
      async () => (await settled(l.n.group, 2)) && (await settled(`${l.n.group}.records`, 2)),
      180_000,
      'two job stages settled',
    );
    const held = new Map((await groupMembers(brokers(), l.n.group)).map((m) => [m.clientId, m.partitions]));
    expect(held.get('job1')?.length).toBe(1);
    await l.rest();
    await l.expectFound();
    for (const p of [job0, job1, ...shards]) p.kill('SIGTERM');
    for (const p of [job0, job1, ...shards]) expect(await exited(p, 60_000)).toBe(0);
    // No step came after its step was closed (a job judged stale on another job's time did that).
    for (const p of [job0, job1]) expect(lateSteps(p)).toBe(0);
  }, 900_000);
});
