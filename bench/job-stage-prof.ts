/**
 * Where a job stage's CPU goes (docs/operations.md, "Capacity"): one simulated job's shard records
 * are made in this process (a `ShardStageRunner` over the host-group-keyed events, as the shards
 * send them), published with the job's own events to topics of their own on the local broker, and
 * read by one real `detect --stage job`, started once the publish is done. Prints its CPU per event
 * of the job by thread from /proc, and, with `--perf FILE` (Linux perf, one sample every ~3 ms of
 * each thread), by what the threads run: the threads named `node` are V8's garbage collector and
 * compilers, libuv's pool and chDB's insert workers, which /proc cannot tell apart. With `--warm`
 * the process first reads a job of the same size until caught up, then its idle cost is measured
 * and the job is published and measured (its start-up, compiling and heap growth apart); with
 * `--node-args "--trace-opt --trace-deopt"` it counts what V8 optimized and deoptimized in the
 * measured window (TRACE_DUMP=FILE keeps the trace).
 *
 *   node --import tsx bench/job-stage-prof.ts [--ranks 65536] [--steps 3] [--warm] [--perf /tmp/js.perf]
 *        [--node-args "--cpu-prof --cpu-prof-dir /tmp/prof"]
 *
 * Needs `npm run --silent build` (it runs bin/rankwatch.js) and the broker (RANKWATCH_KAFKA_BROKERS,
 * or deploy/kafka/kafka.sh started on KAFKA_PORT).
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { KafkaTransport } from '../stream/kafka.js';
import { type Batch, batchByKey } from '../stream/transport.js';
import { broker } from './kafka.bench.js';
import { argOption, cpuSeconds, threadCpuSeconds } from './proc-cpu.js';
import { jobStageInput } from './shard-input.js';

const option = argOption;
const ranks = Number(option('ranks') ?? 65_536);
const steps = Number(option('steps') ?? 3);
const perfFile = option('perf');
/** `--warm`: the process first reads a job of the same size (compiling, heap growth), then the measured one. */
const warm = process.argv.includes('--warm');
const nodeArgs = (option('node-args') ?? '').split(' ').filter(Boolean);

/** CPU ms of a process's live threads by name (the main thread as `main`). */
async function cpuByThread(pid: number): Promise<Map<string, number>> {
  return new Map([...(await threadCpuSeconds(pid))].map(([name, s]) => [name, s * 1000]));
}

/** What a perf sample's symbol is part of. */
function kindOf(sym: string): string {
  if (sym.includes('libchdb') || sym.includes('chdb_node')) return 'chDB';
  if (sym.includes('kernel.kallsyms')) return 'kernel';
  if (
    /Scaveng|Marking|Sweep|MarkCompact|Heap|Evacuat|MemoryChunk|RememberedSet|SlotSet|Minor|Collector/.test(
      sym,
    )
  )
    return 'GC';
  if (/compiler::|maglev|Compile|turboshaft/i.test(sym)) return 'compiler';
  if (sym.includes('Json')) return 'JSON';
  if (/inflate|deflate/.test(sym)) return 'zlib';
  if (/libc\.so|libstdc/.test(sym)) return 'libc';
  return 'JavaScript and V8';
}

/** Samples per thread group (main, other `node` threads, chDB's named threads) and kind. */
function perfSplit(file: string, mainTid: number): string[] {
  const text = execFileSync('perf', ['script', '-i', file, '-F', 'comm,tid,ip,sym,dso'], {
    encoding: 'utf8',
    maxBuffer: 1 << 30,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const by = new Map<string, Map<string, number>>();
  let total = 0;
  for (const line of text.split('\n')) {
    const m = /^\s*(\S+)\s+(\d+)\s+[0-9a-f]+\s+(.*)$/.exec(line);
    if (!m) continue;
    const who =
      Number(m[2]) === mainTid
        ? 'main thread'
        : m[1] === 'node'
          ? 'other threads named node'
          : 'chDB named threads';
    const kinds = by.get(who) ?? new Map<string, number>();
    by.set(who, kinds);
    const k = kindOf(m[3]);
    kinds.set(k, (kinds.get(k) ?? 0) + 1);
    total++;
  }
  return [...by].map(([who, kinds]) => {
    const n = [...kinds.values()].reduce((a, b) => a + b, 0);
    const parts = [...kinds]
      .sort((a, b) => b[1] - a[1])
      .map(([k, c]) => `${k} ${((100 * c) / n).toFixed(0)}%`);
    return `${who}: ${((100 * n) / total).toFixed(0)}% of the samples (${parts.join(', ')})`;
  });
}

const b = await broker();
if (!b) process.exit(1);
let jobBatches: Batch[] = [];
let recordBatches: Batch[] = [];
let records = 0;
let recordBytes = 0;
const make = (job: string) =>
  jobStageInput(ranks, steps, job, {
    jobBatch: (batch) => jobBatches.push(batch),
    records: (rs) => {
      records += rs.length;
      for (const r of rs) recordBytes += JSON.stringify(r).length + 1;
      recordBatches.push(...batchByKey(rs));
    },
  });
if (warm) make('job-stage-warm');
const warmInput = warm ? { jobBatches, recordBatches } : undefined;
jobBatches = [];
recordBatches = [];
records = 0;
recordBytes = 0;
const eventCount = make('job-stage-prof');
const jobEvents = jobBatches.reduce((n, x) => n + x.events.length, 0);
console.log(
  `${eventCount} events of a ${ranks}-rank job, ${steps} steps: the job stage reads ${jobEvents} of them and ${records} shard records (${(recordBytes / eventCount).toFixed(1)} bytes of JSON per event)`,
);

const id = `rw-jsprof.${Date.now().toString(36)}`;
const t = { topic: `${id}.events`, shardTopic: `${id}.shards`, deadLetterTopic: `${id}.dlq` };
const recordsTopic = `${id}.records`;
async function publish(input: { jobBatches: Batch[]; recordBatches: Batch[] }): Promise<void> {
  const events_ = new KafkaTransport({ brokers: b!.brokers, ...t, partitions: 8 });
  await events_.publish(input.jobBatches);
  await events_.stop();
  const records_ = new KafkaTransport({ brokers: b!.brokers, ...t, topic: recordsTopic, partitions: 8 });
  for (let i = 0; i < input.recordBatches.length; i += 256)
    await records_.publish(input.recordBatches.slice(i, i + 256));
  await records_.stop();
}
await publish(warmInput ?? { jobBatches, recordBatches });

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-jsprof-'));
const errPath = join(dir, 'stderr');
// From the sources (tsx) or from dist/bench.
const root = existsSync(join(import.meta.dirname, '..', 'bin')) ? ['..'] : ['..', '..'];
const cli = join(import.meta.dirname, ...root, 'bin', 'rankwatch.js');
const args = [
  ...['detect', '--stage', 'job', '--brokers', b.brokers.join(','), '--topic', t.topic],
  ...[
    '--shard-topic',
    t.shardTopic,
    '--shard-records-topic',
    recordsTopic,
    '--dead-letter-topic',
    t.deadLetterTopic,
  ],
  ...['--group', id, '--partitions', '8', '--data', join(dir, 'data'), '--no-events'],
  ...['--stats-interval', '0', '--idle-advance-s', '2'],
];
const outPath = join(dir, 'stdout');
const p = spawn(process.execPath, [...nodeArgs, cli, ...args], {
  stdio: ['ignore', openSync(outPath, 'w'), openSync(errPath, 'w')],
});
/** Bytes of its stdout when the measured window began (`--node-args "--trace-opt --trace-deopt"` write there). */
let outFrom = 0;
const admin = new Kafka({ brokers: b.brokers, logLevel: logLevel.NOTHING }).admin();
await admin.connect();
const caughtUp = async () => {
  for (const [group, topic] of [
    [id, t.topic],
    [`${id}.records`, recordsTopic],
  ]) {
    const ends = await admin.fetchTopicOffsets(topic);
    const got = await admin.fetchOffsets({ groupId: group, topics: [topic] });
    const at = new Map(got[0].partitions.map((x) => [x.partition, Number(x.offset)]));
    if (!ends.every((e) => Number(e.high) === 0 || (at.get(e.partition) ?? -1) >= Number(e.high)))
      return false;
  }
  return true;
};
let before: Map<string, number> | undefined;
let beforeMs = 0;
let idleMsPerS: number | undefined;
let measuredAt = 0;
let perf: ReturnType<typeof spawn> | undefined;
const t0 = Date.now();
try {
  // Joined (start-up apart), then until both groups committed the last offset.
  for (;;) {
    await new Promise((r) => setTimeout(r, 1000));
    if (p.exitCode !== null) throw new Error(`detect exited: ${readFileSync(errPath, 'utf8').slice(-2000)}`);
    if (Date.now() - t0 > 900_000) throw new Error('the job stage did not catch up in 15 minutes');
    if (!before) {
      if (!readFileSync(errPath, 'utf8').includes('joined group')) continue;
      if (warmInput && !(await caughtUp())) continue;
      if (warmInput) {
        // What it costs idle, warm: a fixed cost per second, not per event.
        const idle0 = await cpuSeconds(p.pid!);
        await new Promise((r) => setTimeout(r, 10_000));
        idleMsPerS = ((await cpuSeconds(p.pid!)) - idle0) * 100;
      }
      before = await cpuByThread(p.pid!);
      beforeMs = (await cpuSeconds(p.pid!)) * 1000;
      measuredAt = Date.now();
      outFrom = statSync(outPath).size;
      if (perfFile)
        perf = spawn('perf', ['record', '-F', '299', '--per-thread', '-p', String(p.pid), '-o', perfFile], {
          stdio: 'ignore',
        });
      if (warmInput) await publish({ jobBatches, recordBatches });
    } else if (await caughtUp()) break;
  }
  const after = await cpuByThread(p.pid!);
  perf?.kill('SIGINT');
  if (perf) await new Promise((r) => perf!.once('exit', r));
  const total = (await cpuSeconds(p.pid!)) * 1000 - beforeMs;
  const used: [string, number][] = [...after]
    .map(([k, ms]): [string, number] => [k, ms - (before!.get(k) ?? 0)])
    .sort((a, b) => b[1] - a[1]);
  // chDB starts threads per query (RuntimeData, QueryPipelineEx...): ended, they count in the process's total only.
  used.push(['threads that ended (chDB query threads)', total - used.reduce((s, [, ms]) => s + ms, 0)]);
  const us = (ms: number) => ((ms * 1000) / eventCount).toFixed(2);
  const windowS = (Date.now() - measuredAt) / 1000;
  console.log(
    `job stage: ${us(total)} µs of CPU per event of the job over ${windowS.toFixed(0)} s` +
      (idleMsPerS === undefined
        ? ''
        : `; idle it costs ${idleMsPerS.toFixed(1)} ms a second, so ${us(total - idleMsPerS * windowS)} µs of work per event`),
  );
  console.log(
    `by thread name, µs per event: ${used
      .filter(([, ms]) => ms > 0)
      .map(([k, ms]) => `${k} ${us(ms)}`)
      .join(', ')}`,
  );
  if (perfFile) for (const line of perfSplit(perfFile, p.pid!)) console.log(line);
  const traced = readFileSync(outPath, 'utf8').slice(outFrom);
  if (nodeArgs.includes('--trace-opt'))
    console.log(
      `in the measured window V8 optimized ${traced.match(/completed optimizing/g)?.length ?? 0} functions and deoptimized ${traced.match(/bailout \(kind/g)?.length ?? 0}`,
    );
  if (process.env.TRACE_DUMP) writeFileSync(process.env.TRACE_DUMP, traced);
} finally {
  p.kill('SIGTERM');
  await new Promise((r) => (p.exitCode !== null ? r(0) : p.once('exit', r)));
  await admin.deleteTopics({ topics: [t.topic, recordsTopic, t.deadLetterTopic] }).catch(() => {});
  await admin.disconnect();
  rmSync(dir, { recursive: true, force: true });
  await b.stop?.();
}
