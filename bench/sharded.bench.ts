/**
 * The sharded layout's cost (docs/operations.md, "Capacity"): one simulated job (65,536 ranks by
 * default; `npm run bench -- sharded --ranks N --steps S`) keyed by host group, published to the
 * local broker and read by one unsharded `detect` (the baseline) and by 1, 2 and 4
 * `detect --stage shard` processes plus a `detect --stage job`, one layout at a time. Each layout
 * gets topics of its own, published while its processes, all holding their partitions, are
 * stopped (SIGSTOP, with a session timeout longer than the publish): a process that joined first
 * would otherwise read partitions that a later join moves to another, which then replays them
 * (rebalance work, more of it the more processes, not the layout's steady cost), and a publish
 * slower than the readers would measure small deliveries and idle flushes. The processes first
 * read the job's first `--warm-steps` steps (3 by default) as they come, until caught up: what a
 * process pays once (compiling its code, growing its heap) and what a job pays once (its ranks,
 * communicators and per-rank state made at its first step) are not what carrying it costs; a
 * 100k-GPU job runs for days. The measured part is its next `--steps` steps. The job's event time
 * lies an hour or two ahead of the clock, so that the idle bus between the parts (whose time is
 * the wall clock's) neither ends the job nor ages its state. Each process's CPU
 * time (user + system from /proc, chDB's threads included) is read over an idle window first
 * (what it costs per second with nothing to do: polling, timers, the engine), then from SIGCONT
 * until every group has committed the last offset: the difference, summed
 * over the layout's processes, per event, and the same less each process's idle cost over that
 * time. On 2 cores shared with the broker this says what a layout costs, not how fast it runs;
 * the job stage's share gives the largest job one job stage carries at 50% of a core. The records
 * topic is read back after each layout: how many messages and records (by type) the shards sent.
 * `--layouts 0,1` measures some layouts only; `--prof DIR` writes a `--cpu-prof` profile of the job
 * stage (and of the unsharded process) there. Where the job stage's threads spend: job-stage-prof.ts.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import type { RankwatchEvent } from '../schema/events.js';
import { ClusterSim } from '../sim/cluster.js';
import { decodeBatch } from '../stream/codec.js';
import { HostGroupKeys } from '../stream/host-groups.js';
import { KafkaTransport } from '../stream/kafka.js';
import { type Batch, batchByKey } from '../stream/transport.js';
import { loadNote, type Measurement, type Section } from './harness.js';
import { broker } from './kafka.bench.js';
import { argOption, cpuSeconds, threadCpuSeconds } from './proc-cpu.js';

const PARTITIONS = 8;

const option = argOption;
const flag = (name: string, fallback: number) => Number(option(name) ?? fallback);

interface Layout {
  name: string;
  shards: number;
  cpuUs: number;
  jobCpuUs: number;
  /** What the processes would have spent idle over the same wall time (their idle rate). */
  idleUs: number;
  jobIdleUs: number;
  wallS: number;
  /** The job stage's (the unsharded process's) CPU by thread group, µs. */
  jobThreads: number[];
  /** What the shards sent the job stage: Kafka messages, and records by type (`t`). */
  sent?: { messages: number; records: Map<string, number> };
}

/** A topic's offsets where its partitions end now, by partition. */
async function endsOf(kafka: Kafka, topic: string): Promise<Map<number, number>> {
  const admin = kafka.admin();
  await admin.connect();
  const ends = await admin.fetchTopicOffsets(topic).finally(() => admin.disconnect());
  return new Map(ends.map((e) => [e.partition, Number(e.high)]));
}

/** Messages on a topic from offsets `from` on, and their records by type: what the shards sent their job stage. */
async function recordsOn(kafka: Kafka, topic: string, from: Map<number, number>): Promise<Layout['sent']> {
  const ends = await endsOf(kafka, topic);
  let messages = 0;
  for (const [p, high] of ends) messages += high - (from.get(p) ?? 0);
  let all = 0;
  for (const high of ends.values()) all += high;
  const records = new Map<string, number>();
  const consumer = kafka.consumer({ groupId: `${topic}-count` });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let seen = 0;
  const read = new Promise<void>((resolve) => {
    if (all === 0) resolve();
    void consumer.run({
      eachMessage: async ({ partition, message }) => {
        // The warm-up's records (before `from`) are read past, not counted.
        if (Number(message.offset) >= (from.get(partition) ?? 0))
          for (const r of decodeBatch(message.value!).events) {
            const t = String((r as { t?: unknown }).t);
            records.set(t, (records.get(t) ?? 0) + 1);
          }
        if (++seen >= all) resolve();
      },
    });
  });
  await read;
  await consumer.disconnect();
  return { messages, records };
}

/**
 * A process's threads: JavaScript (the main thread); the others named `node` (V8's garbage
 * collector and compilers, libuv's pool, and the engine threads that keep the process's name:
 * this split cannot tell those apart); and the embedded engine's named threads (chDB's), which a
 * deployment with a ClickHouse server runs there, not in `detect`.
 */
const THREADS = ['JavaScript', 'other threads named node', 'chDB named threads'] as const;

/** CPU seconds of a process's threads, by `THREADS` (live threads only). */
async function cpuByThread(pid: number): Promise<number[]> {
  const out = [0, 0, 0];
  for (const [name, s] of await threadCpuSeconds(pid))
    out[name === 'main' ? 0 : name === 'node' ? 1 : 2] += s;
  return out;
}

/** Seconds of the idle window in which each process's cost with nothing to read is measured. */
const IDLE_S = 8;

export async function shardedBench(): Promise<Section | undefined> {
  const ranks = flag('ranks', 65_536);
  const steps = flag('steps', 3);
  const warmSteps = flag('warm-steps', 3);
  const profDir = option('prof');
  // `--layouts 0,1`: some layouts only (0: the unsharded baseline, always measured first).
  const shardCounts = (option('layouts') ?? '0,1,2,4').split(',').map(Number);
  if (shardCounts[0] !== 0 || !shardCounts.every((c) => Number.isInteger(c) && c >= 0))
    throw new Error('--layouts: shard counts, the first 0 (the unsharded baseline), e.g. 0,1');
  const b = await broker();
  if (!b) return undefined;
  const startTs = Math.floor(Date.now() / 3_600_000) * 3_600_000 + 3_600_000;
  const all: RankwatchEvent[] = [
    ...new ClusterSim({ ranks, steps: warmSteps + steps, startTs, job: 'sharded-bench' }).events(),
  ];
  // The warm-up: everything up to the last step event of its steps (the end of step warmSteps - 1).
  let boundary = Number.NEGATIVE_INFINITY;
  for (const e of all) if (e.kind === 'step' && e.step < warmSteps && e.ts > boundary) boundary = e.ts;
  const split = warmSteps > 0 ? all.findIndex((e) => e.ts > boundary) : 0;
  const warm = all.slice(0, split);
  const events = all.slice(split);
  const n = events.length;
  // The measured steps' time: from the warm-up's end (else the first event) to the last event.
  const spanS = (events.at(-1)!.ts - (warmSteps > 0 ? boundary : events[0].ts)) / 1000;
  const id = `rw-bench.${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
  const created: string[] = [];
  const kafka = new Kafka({ brokers: b.brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-sharded-bench-'));
  // 16 groups (512 hosts each at 65,536 ranks, the default size) over the partitions.
  const groupHosts = Math.max(1, Math.floor(ranks / 8 / 16));
  // As collectors send them: one message per host and second (the job's own events apart).
  const perHostSecond = (es: RankwatchEvent[]) => {
    const out: RankwatchEvent[][] = [];
    const at = new Map<string, RankwatchEvent[]>();
    for (const e of es) {
      const k = `${(e as { host?: string }).host ?? ''}|${Math.floor(e.ts / 1000)}`;
      let list = at.get(k);
      if (!list) {
        list = [];
        at.set(k, list);
        out.push(list);
      }
      list.push(e);
    }
    return out;
  };
  const parts = { warm: perHostSecond(warm), measured: perHostSecond(events) };
  const publish = async (
    t: KafkaTransport,
    keyed: (es: RankwatchEvent[]) => Batch[],
    messages: RankwatchEvent[][],
  ) => {
    for (let i = 0; i < messages.length; i += 512) await t.publish(messages.slice(i, i + 512).flatMap(keyed));
    await t.stop();
  };
  try {
    const layouts: Layout[] = [];
    const run = async (shards: number): Promise<Layout> => {
      const group = `${id}-${shards}`;
      const records = `${id}.records-${shards}`;
      const t = {
        topic: `${id}.${shards}`,
        shardTopic: `${id}.${shards}-shards`,
        deadLetterTopic: `${id}.dlq`,
      };
      created.push(records, t.topic, t.shardTopic, t.deadLetterTopic);
      const args = (stage: string, client: string) => [
        join(import.meta.dirname, '..', '..', 'bin', 'rankwatch.js'),
        'detect',
        '--stage',
        stage,
        '--brokers',
        b.brokers.join(','),
        '--topic',
        t.topic,
        '--shard-topic',
        t.shardTopic,
        '--shard-records-topic',
        records,
        '--dead-letter-topic',
        t.deadLetterTopic,
        '--group',
        group,
        '--client-id',
        client,
        '--partitions',
        String(PARTITIONS),
        '--data',
        join(dir, `${group}-${client}`),
        '--no-events',
        '--stats-interval',
        '0',
        '--idle-advance-s',
        '2',
        // Stopped while the layout's input is published: not a reason to take their partitions.
        '--session-timeout-ms',
        '600000',
      ];
      const roles =
        shards === 0
          ? [['all', 'one']]
          : [['job', 'job'], ...Array.from({ length: shards }, (_, i) => ['shard', `shard${i}`])];
      const procs = roles.map(([stage, client]) => {
        // `--prof DIR`: a CPU profile of the job stage (of the unsharded process) where its time goes.
        const prof =
          profDir && (stage === 'job' || stage === 'all') ? ['--cpu-prof', '--cpu-prof-dir', profDir] : [];
        const p = spawn(process.execPath, [...prof, ...args(stage, client)], {
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        let log = '';
        p.stderr.on('data', (d) => {
          log += d;
        });
        return { stage, p, log: () => log };
      });
      const groups =
        shards === 0
          ? [[group, t.topic]]
          : [
              [group, t.topic],
              [`${group}.shards`, t.shardTopic],
              [`${group}.records`, records],
            ];
      // Every process has joined (start-up is not the layout's cost), then its CPU so far.
      const until = Date.now() + 300_000;
      while (!procs.every((x) => x.log().includes('joined group'))) {
        if (Date.now() > until || procs.some((x) => x.p.exitCode !== null))
          throw new Error(`detect did not start: ${procs.map((x) => x.log()).join('\n')}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      const done = async () => {
        for (const [g, topic] of groups) {
          const ends = await admin.fetchTopicOffsets(topic);
          const got = await admin.fetchOffsets({ groupId: g, topics: [topic] });
          const committed = new Map(got[0].partitions.map((p) => [p.partition, Number(p.offset)]));
          if (
            !ends.every((e) => Number(e.high) === 0 || (committed.get(e.partition) ?? -1) >= Number(e.high))
          )
            return false;
        }
        return true;
      };
      // Caught up, and still caught up after the shards' idle flush (their last steps' records).
      const caughtUp = async () => {
        for (let settled = 0; settled < 2; ) {
          await new Promise((r) => setTimeout(r, 2500));
          settled = (await done()) ? settled + 1 : 0;
          if (Date.now() > until + 1_200_000) throw new Error('the layout did not catch up');
        }
      };
      // Sharded keys (host groups to the shard topic); the baseline reads the same events keyed by job.
      const keys = new HostGroupKeys({ groupHosts });
      const keyed = (es: RankwatchEvent[]) => (shards === 0 ? batchByKey(es) : keys.batch(es));
      const transport = () => new KafkaTransport({ brokers: b.brokers, ...t, partitions: PARTITIONS });
      if (parts.warm.length) {
        await publish(transport(), keyed, parts.warm);
        await caughtUp();
      }
      const cpu = () => Promise.all(procs.map((x) => cpuSeconds(x.p.pid!)));
      const idleFrom = await cpu();
      await new Promise((r) => setTimeout(r, IDLE_S * 1000));
      const idleTo = await cpu();
      const idlePerS = idleTo.map((c, i) => ((c - idleFrom[i]) * 1e6) / IDLE_S);
      for (const x of procs) x.p.kill('SIGSTOP');
      const recordsFrom = shards
        ? await endsOf(kafka, records).catch(() => new Map<number, number>())
        : new Map<number, number>();
      await publish(transport(), keyed, parts.measured);
      const before = await cpu();
      const threadsBefore = await cpuByThread(procs[0].p.pid!);
      const t0 = Date.now();
      for (const x of procs) x.p.kill('SIGCONT');
      await caughtUp();
      const after = await cpu();
      const threadsAfter = await cpuByThread(procs[0].p.pid!);
      const wallS = (Date.now() - t0) / 1000;
      const used = after.map((a, i) => (a - before[i]) * 1e6);
      const idle = idlePerS.map((r) => r * wallS);
      for (const x of procs) x.p.kill('SIGTERM');
      await Promise.all(
        procs.map((x) => new Promise((r) => (x.p.exitCode !== null ? r(0) : x.p.once('exit', r)))),
      );
      return {
        name:
          shards === 0
            ? 'one detect process (unsharded)'
            : `${shards} shard process${shards > 1 ? 'es' : ''} + job stage`,
        shards,
        cpuUs: used.reduce((s, u) => s + u, 0),
        jobCpuUs: used[0],
        idleUs: idle.reduce((s, u) => s + u, 0),
        jobIdleUs: idle[0],
        wallS,
        jobThreads: threadsAfter.map((a, i) => (a - threadsBefore[i]) * 1e6),
        ...(shards ? { sent: await recordsOn(kafka, records, recordsFrom) } : {}),
      };
    };
    for (const shards of shardCounts) {
      process.stderr.write(`  ${shards === 0 ? 'unsharded' : `${shards} shards`}...\n`);
      layouts.push(await run(shards));
    }
    const m = (l: Layout): Measurement => ({
      name: l.name,
      items: n,
      unit: 'events',
      bestMs: l.cpuUs / 1000,
    });
    const [base, ...rows] = layouts;
    const perEvent = (l: Layout) => l.cpuUs / n;
    const perGpuSecond = (l: Layout) => l.jobCpuUs / (ranks * spanS);
    const notes = [
      `${n.toLocaleString('en-US')} events of one ${ranks.toLocaleString('en-US')}-rank job, ${steps} steps measured after its first ${warmSteps} (${warm.length.toLocaleString('en-US')} events, read first: the warm-up) (${(n / ranks / spanS).toFixed(2)} events per GPU per second of event time), ${groupHosts} host(s) per group, one message per host and second as collectors send them, ${PARTITIONS} partitions, \`--no-events\` (steps and findings stored in each process's chDB).`,
      ...layouts.map(
        (l) =>
          `${l.name}: ${perEvent(l).toFixed(1)} µs of CPU per event summed over its processes${l.shards ? `, job stage ${((100 * l.jobCpuUs) / l.cpuUs).toFixed(0)}% of it (${(l.jobCpuUs / n).toFixed(1)} µs per event of the job)` : ''}; of that, ${(l.idleUs / n).toFixed(1)} µs is what its ${l.shards + 1} process${l.shards ? 'es' : ''} cost idle (measured over ${IDLE_S} s before the publish) over the ${l.wallS.toFixed(0)} s it took, so ${((l.cpuUs - l.idleUs) / n).toFixed(1)} µs of work per event${l.shards ? ` (job stage ${((l.jobCpuUs - l.jobIdleUs) / n).toFixed(1)})` : ''}.`,
      ),
      ...rows.map(
        (l) =>
          `${l.name}: one job stage at 50% of a core carries a job of ${Math.round(0.5e6 / perGpuSecond(l)).toLocaleString('en-US')} GPUs at this event rate (${Math.round((0.5e6 - l.jobIdleUs / l.wallS) / ((l.jobCpuUs - l.jobIdleUs) / (ranks * spanS))).toLocaleString('en-US')} counting its idle cost per second once, not per event).`,
      ),
      // What the job stage reads comes per rank and step (steps, p2p edges, a communicator's
      // record), not per GPU sample: a job whose steps are longer costs it less per second.
      ...rows.map((l) => {
        const perRankStep = (l.jobCpuUs - l.jobIdleUs) / (ranks * steps);
        const fits = (stepS: number) =>
          Math.round(((0.5e6 - l.jobIdleUs / l.wallS) * stepS) / perRankStep).toLocaleString('en-US');
        return `${l.name}: the job stage's work, ${perRankStep.toFixed(1)} µs per rank and step (its idle cost apart); at 50% of a core it carries a job of ${fits(spanS / steps)} GPUs at this run's ${(spanS / steps).toFixed(2)} s per step, ${fits(3.2)} at 3.2 s per step.`;
      }),
      ...rows.map(
        (l) =>
          `${l.name}: the shards sent the job stage ${l.sent!.messages.toLocaleString('en-US')} messages of ${[...l.sent!.records.values()].reduce((a, b) => a + b, 0).toLocaleString('en-US')} records (${[...l.sent!.records].map(([t, c]) => `${t} ${c.toLocaleString('en-US')}`).join(', ')}).`,
      ),
      ...layouts.map(
        (l) =>
          `${l.shards ? `${l.name}, the job stage` : l.name} by thread, µs per event: ${THREADS.map((t, i) => `${t} ${(l.jobThreads[i] / n).toFixed(1)}`).join(', ')}.`,
      ),
      `Largest job one unsharded process carries at 50% of a core: ${Math.round(0.5e6 / (perEvent(base) * (n / ranks / spanS))).toLocaleString('en-US')} GPUs.`,
      loadNote(),
    ];
    return {
      title: `Sharded layout: ${ranks.toLocaleString('en-US')} ranks over ${rows
        .map((l) => l.shards)
        .join(', ')
        .replace(/, (\d+)$/, ' and $1')} shard${rows.length === 1 && rows[0].shards === 1 ? '' : 's'}`,
      what: 'CPU per event of each layout, summed over its processes, as events per second of CPU time (higher is cheaper); baseline: one unsharded `detect` over the same events keyed by job.',
      baseline: m(base),
      rows: rows.map(m),
      notes,
    };
  } finally {
    await admin
      .deleteTopics({ topics: created.filter((t, i) => created.indexOf(t) === i), timeout: 30_000 })
      .catch(() => {});
    await admin.disconnect();
    rmSync(dir, { recursive: true, force: true });
    await b.stop?.();
  }
}
