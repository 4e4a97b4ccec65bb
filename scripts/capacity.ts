/**
 * `npm run capacity`: how many partitions, `detect` processes and how much ClickHouse ingest one
 * training job needs, from 1k to 100k GPUs, computed from costs measured here in this run:
 *
 * - wire: one simulated 100k-rank job (sim/cluster.ts, a few steps) as the collectors send it:
 *   one gzip message per host and second (collectors/collector.ts batches by key, codec gzips);
 * - per event: decode (gunzip + JSON.parse), validate + every detector (per event kind), the
 *   store insert of raw events and step rows into chDB (the embedded ClickHouse engine), and,
 *   when a broker is up or can be started, the kafkajs fetch of the same messages.
 *
 * `--steps N` (default 3) steps of the 100k-rank job; `--no-kafka` skips the broker.
 * The assumptions the table rests on are printed with it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { Kafka, logLevel } from 'kafkajs';
import { broker } from '../bench/kafka.bench.js';
import { DetectorRunner } from '../detectors/runner.js';
import type { RankwatchEvent } from '../schema/events.js';
import { validateEvent } from '../schema/validate.js';
import { ClusterSim } from '../sim/cluster.js';
import { ChdbStore } from '../store/chdb.js';
import { eventRows, insertBody } from '../store/rows.js';
import { decodeBatch, encodeBatch } from '../stream/codec.js';

const { values: args } = parseArgs({
  options: { steps: { type: 'string', default: '3' }, 'no-kafka': { type: 'boolean', default: false } },
});
const GPUS = [1_000, 4_000, 16_000, 32_000, 64_000, 100_000];
/** Share of one core a detect process may use at the steady rate: room for catch-up after a stall or rebalance. */
const HEADROOM = 0.5;
/** Compressed bytes/s one partition is planned for (a common sizing figure; one broker takes many such). */
const PARTITION_BYTES = 10e6;
const DELIVERY = 32_768;

const cpuUs = (c: NodeJS.CpuUsage) => c.user + c.system;
const log = (s: string) => process.stderr.write(`${s}\n`);

/** One job as it is on the wire: events per second, and gzip bytes per event for one message per host and second. */
function wire(ranks: number, steps: number) {
  const sim = new ClusterSim({ ranks, steps, startTs: Date.UTC(2026, 0, 1) });
  const hosts = Math.ceil(ranks / sim.layout.gpusPerHost);
  // Compress every 25th host's messages (hosts are alike); count every event.
  const sampleEvery = hosts > 200 ? 25 : 1;
  const open = new Map<string, { sec: number; events: RankwatchEvent[] }>();
  let events = 0;
  let sampled = 0;
  let gzBytes = 0;
  let jsonBytes = 0;
  let messages = 0;
  let stepMsSum = 0;
  let stepEvents = 0;
  const kinds: Record<string, number> = {};
  const flush = (m: { events: RankwatchEvent[] }) => {
    const text = encodeBatch(m.events);
    jsonBytes += text.length;
    gzBytes += encodeBatch(m.events, true).length;
    sampled += m.events.length;
    messages++;
  };
  const hostIndex = new Map<string, number>();
  for (const e of sim.events()) {
    events++;
    kinds[e.kind] = (kinds[e.kind] ?? 0) + 1;
    if (e.kind === 'step') {
      stepMsSum += e.step_ms;
      stepEvents++;
    }
    const host = (e as { host?: string }).host ?? '';
    let hi = hostIndex.get(host);
    if (hi === undefined) {
      hi = hostIndex.size;
      hostIndex.set(host, hi);
    }
    if (hi % sampleEvery !== 0) continue;
    const sec = Math.floor(e.ts / 1000);
    const m = open.get(host);
    if (m && m.sec !== sec) {
      flush(m);
      open.delete(host);
    }
    const cur = open.get(host) ?? { sec, events: [] };
    cur.events.push(e);
    open.set(host, cur);
  }
  for (const m of open.values()) flush(m);
  const stepS = stepMsSum / stepEvents / 1000;
  const perRankPerS = events / ranks / steps / stepS;
  return {
    ranks,
    hosts,
    events,
    kinds,
    stepS,
    perRankPerS,
    gzPerEvent: gzBytes / sampled,
    jsonPerEvent: jsonBytes / sampled,
    eventsPerMessage: sampled / messages,
  };
}

/** Best of `runs` of fn, in µs of CPU (this process, engine threads included) and of wall time, per item. */
async function cost(items: number, fn: () => unknown, runs = 3): Promise<{ cpu: number; wall: number }> {
  await fn();
  let best = { cpu: Number.POSITIVE_INFINITY, wall: Number.POSITIVE_INFINITY };
  for (let i = 0; i < runs; i++) {
    const c0 = process.cpuUsage();
    const t = performance.now();
    await fn();
    const wall = ((performance.now() - t) * 1000) / items;
    const cpu = cpuUs(process.cpuUsage(c0)) / items;
    if (wall < best.wall) best = { cpu, wall };
  }
  return best;
}

async function perEventCosts(noKafka: boolean) {
  const sim = new ClusterSim({ ranks: 1024, steps: 30, startTs: Date.now() - 3_600_000 });
  const all = [...sim.events()];
  // Messages as collectors send them: per host and second.
  const byHostSec = new Map<string, RankwatchEvent[]>();
  for (const e of all) {
    const k = `${(e as { host?: string }).host ?? ''}/${Math.floor(e.ts / 1000)}`;
    const list = byHostSec.get(k);
    if (list) list.push(e);
    else byHostSec.set(k, [e]);
  }
  const msgs = [...byHostSec.values()].map((evs) => encodeBatch(evs, true));
  log(`per-event costs: ${all.length} events of a 1024-rank job in ${msgs.length} messages`);
  const decode = await cost(all.length, () => {
    for (const m of msgs) decodeBatch(m);
  });
  const gunzip = await cost(all.length, () => {
    for (const m of msgs) gunzipSync(m);
  });
  const detect = async (events: RankwatchEvent[]) =>
    cost(events.length, () => {
      const r = new DetectorRunner();
      for (const e of events) {
        const v = validateEvent(e);
        if (v.ok) r.push(v.event);
      }
      r.flush();
      r.take();
    });
  const detectAll = await detect(all);
  const byKind: Record<string, { cpu: number; wall: number; share: number }> = {};
  for (const kind of ['step', 'collective', 'gpu']) {
    const evs = all.filter((e) => e.kind === kind);
    byKind[kind] = { ...(await detect(evs)), share: evs.length / all.length };
  }
  const lines = all.map((e) => JSON.stringify(e));
  // Building the insert bodies happens in the detect process whichever store it writes to.
  const encode = await cost(all.length, () => {
    for (let i = 0; i < all.length; i += DELIVERY)
      for (const b of eventRows(all.slice(i, i + DELIVERY), lines.slice(i, i + DELIVERY))) insertBody(b);
  });
  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-capacity-'));
  let store: { cpu: number; wall: number };
  const steps = all.filter((e) => e.kind === 'step').length;
  try {
    const s = new ChdbStore({ path: dir });
    await s.migrate();
    let run = 0;
    // As the pipeline writes a delivery: raw events and step rows, one token per delivery.
    store = await cost(all.length, async () => {
      run++;
      for (let i = 0; i < all.length; i += DELIVERY) {
        const token = `capacity/${run}/${i}`;
        await s.insert(
          eventRows(all.slice(i, i + DELIVERY), lines.slice(i, i + DELIVERY)).map((b) => ({ ...b, token })),
        );
      }
    });
    await s.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const fetch = noKafka ? undefined : await kafkaFetch(msgs, all.length);
  return { events: all.length, steps, decode, gunzip, detectAll, byKind, encode, store, fetch };
}

/** The kafkajs fetch of the same messages (no decode), µs of wall time per event; undefined without a broker. */
async function kafkaFetch(msgs: Buffer[], events: number): Promise<number | undefined> {
  const b = await broker();
  if (!b) return undefined;
  const kafka = new Kafka({ brokers: b.brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  const topic = `rw-capacity.${Date.now().toString(36)}`;
  try {
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
    const producer = kafka.producer();
    await producer.connect();
    for (let i = 0; i < msgs.length; i += 200)
      await producer.send({
        topic,
        messages: msgs.slice(i, i + 200).map((value) => ({ key: 'job', value })),
      });
    await producer.disconnect();
    const consumer = kafka.consumer({
      groupId: `${topic}-g`,
      maxBytesPerPartition: 4 << 20,
      maxWaitTimeInMs: 100,
    });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    let got = 0;
    let t = 0;
    // Timed from the group join (the join is start-up, not throughput); small fetches, as under load.
    consumer.on(consumer.events.GROUP_JOIN, () => {
      t = performance.now();
    });
    await new Promise<void>((done) => {
      void consumer.run({
        eachBatch: async ({ batch }) => {
          got += batch.messages.length;
          if (got >= msgs.length) done();
        },
      });
    });
    const us = ((performance.now() - t) * 1000) / events;
    await consumer.disconnect();
    return us;
  } finally {
    await admin.deleteTopics({ topics: [topic] }).catch(() => {});
    await admin.disconnect();
    await b.stop?.();
  }
}

const fmt = (x: number) => Math.round(x).toLocaleString('en-US');
const f1 = (x: number) => x.toFixed(1);

const steps = Number(args.steps);
log(`wire: one 100,000-rank job, ${steps} steps...`);
const big = wire(100_000, steps);
log('wire: one 1,024-rank job, the same steps...');
const small = wire(1_024, steps);
const c = await perEventCosts(args['no-kafka']);

const out: string[] = [];
const p = (s = '') => out.push(s);
p('## Measured here');
p();
p(
  `- One 100,000-rank job (${fmt(big.hosts)} hosts, ${steps} steps of ${big.stepS.toFixed(2)} s): ${fmt(big.events)} events, ` +
    `${f1(big.perRankPerS)} events/s per rank (1,024 ranks: ${f1(small.perRankPerS)}), so ${fmt(big.perRankPerS * 100_000)} events/s for the job; ` +
    `by kind ${Object.entries(big.kinds)
      .map(([k, n]) => `${k} ${((100 * n) / big.events).toFixed(1)}%`)
      .join(', ')}.`,
);
p(
  `- On the wire as collectors send it (one gzip message per host and second, ${f1(big.eventsPerMessage)} events each): ` +
    `${f1(big.gzPerEvent)} bytes per event compressed (${f1(big.jsonPerEvent)} as JSON), so ${f1((big.gzPerEvent * big.perRankPerS * 100_000) / 1e6)} MB/s for the job.`,
);
p(
  `- Per event, µs (CPU of this process; wall in brackets), ${fmt(c.events)} events of a 1,024-rank job: ` +
    `decode ${f1(c.decode.cpu)} (gunzip alone ${f1(c.gunzip.cpu)}), ` +
    `validate + every detector ${f1(c.detectAll.cpu)} [${f1(c.detectAll.wall)}] ` +
    `(step events ${f1(c.byKind.step.cpu)}, collectives ${f1(c.byKind.collective.cpu)}, GPU samples ${f1(c.byKind.gpu.cpu)}), ` +
    `building the insert bodies ${f1(c.encode.cpu)}, ` +
    `chDB insert of raw events + step rows ${f1(c.store.cpu)} [${f1(c.store.wall)}] (bodies included)` +
    (c.fetch === undefined
      ? ', kafkajs fetch not measured (no broker)'
      : `, kafkajs fetch [${c.fetch.toFixed(2)}]`) +
    '.',
);
const fetchUs = c.fetch ?? 0;
const detectUs = fetchUs + c.decode.cpu + c.detectAll.cpu + c.encode.cpu;
const perProcess = (HEADROOM * 1e6) / detectUs;
// Sharded by pipeline stage: step events (job-level figures) in one process; collectives and GPU
// samples, the bulk, in shards whose per-link / per-GPU results are merged into the job's figures.
const stepShare = (big.kinds.step ?? 0) / big.events;
const stepStageUs = fetchUs + c.decode.cpu + c.encode.cpu + c.byKind.step.cpu;
const restUs =
  fetchUs +
  c.decode.cpu +
  c.encode.cpu +
  (c.byKind.collective.cpu * c.byKind.collective.share + c.byKind.gpu.cpu * c.byKind.gpu.share) /
    (c.byKind.collective.share + c.byKind.gpu.share);
const stepStageGpus =
  (HEADROOM * 1e6) / stepStageUs / (Math.max(big.perRankPerS, small.perRankPerS) * stepShare);
p(
  `- One detect process (one core) does fetch + decode + validate + detect + insert bodies in ${f1(detectUs)} µs per event: ${fmt(1e6 / detectUs)} events/s flat out, ` +
    `${fmt(perProcess)} at ${HEADROOM * 100}% of its core: one job fits one process up to ${fmt(perProcess / Math.max(big.perRankPerS, small.perRankPerS))} GPUs.`,
);
p(
  `- Step events alone (${(stepShare * 100).toFixed(1)}% of a job's events) cost ${f1(stepStageUs)} µs each with fetch, decode and insert bodies: one process carries the step stage of a job up to ${fmt(stepStageGpus)} GPUs.`,
);
p();
p('## Capacity per job');
p();
p(
  '| GPUs | events/s | MB/s on the wire (gzip) | partitions | detect processes | how | ClickHouse ingest, events + step rows/s | engine cores for inserts |',
);
p('| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |');
// The busier of the two simulated jobs sets the per-GPU rate (the smaller job's steps are shorter).
const perGpu = Math.max(big.perRankPerS, small.perRankPerS);
for (const g of GPUS) {
  const ev = perGpu * g;
  const bytes = ev * big.gzPerEvent;
  const one = ev <= perProcess;
  const shards = Math.ceil((ev * (1 - stepShare) * restUs) / (HEADROOM * 1e6));
  const procs = one ? 1 : 1 + shards;
  const partitions = Math.max(Math.ceil(bytes / PARTITION_BYTES), procs);
  const how = one
    ? 'one partition, one process'
    : `${f1(ev / perProcess)}× one process: estimate (the job stage at step records' cost; \`npm run bench -- sharded\` measures it), step stage in 1, collectives and GPU samples in ${shards} shard${shards > 1 ? 's' : ''}`;
  const rows = ev * (1 + stepShare);
  p(
    `| ${fmt(g)} | ${fmt(ev)} | ${f1(bytes / 1e6)} | ${partitions} | ${procs} | ${how} | ${fmt(rows)} | ${f1((ev * (c.store.cpu - c.encode.cpu)) / 1e6)} |`,
  );
}
p();
p('Assumptions:');
p(
  `- Every GPU is one rank and emits what the simulator emits (per step: a step record and ${f1((big.kinds.collective ?? 0) / (big.kinds.step ?? 1))} collective records; GPU samples at 1 Hz); ${f1(Math.max(big.perRankPerS, small.perRankPerS))} events/s per GPU, the busier of the 100,000-rank job (${big.stepS.toFixed(2)} s steps) and the 1,024-rank one (${small.stepS.toFixed(2)} s steps) as simulated. Events/s scale with 1/step time: longer steps need proportionally less.`,
);
p(
  `- A detect process is planned at ${HEADROOM * 100}% of one core at the steady rate (room to catch up after a stall or a rebalance). Costs are CPU µs on this machine (${process.arch}, ${cpus().length} cores shared with other work, so they are high; the ratios hold).`,
);
p(
  `- A partition is planned for ${PARTITION_BYTES / 1e6} MB/s compressed and carries one detect process: partitions = max(wire MB/s / ${PARTITION_BYTES / 1e6}, processes).`,
);
p(
  `- ClickHouse ingest: every raw event plus a step row per step event; detector output is small beside it. Engine cores: the embedded engine's CPU per event here for the same rows (with the per-minute views), less the bodies the detect process builds; a server's per-row insert cost is of the same order.`,
);
process.stdout.write(`${out.join('\n')}\n`);
