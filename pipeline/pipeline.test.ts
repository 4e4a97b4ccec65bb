import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { LIFECYCLE_DEFAULTS } from '../detectors/findings.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { ChdbStore } from '../store/chdb.js';
import { findingsOf, rankHeatmap, tableCounts } from '../store/queries.js';
import { SCHEMA_OBJECTS } from '../store/schema.js';
import { decodeBatch } from '../stream/codec.js';
import { MemoryTransport } from '../stream/memory.js';
import { batchByKey } from '../stream/transport.js';
import { SwitchableStore } from '../tests/helpers.js';
import { buildPipeline } from './build.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-pipeline-'));
const chdb = new ChdbStore({ path: dir });
afterAll(async () => {
  await chdb.close();
  rmSync(dir, { recursive: true, force: true });
});
beforeEach(async () => {
  for (const t of SCHEMA_OBJECTS) await chdb.exec(`DROP TABLE IF EXISTS ${t}`);
});

function job(faults: string[] = []) {
  return new ClusterSim({
    ranks: 32,
    steps: 60,
    seed: 2,
    startTs: Date.now() - 600_000,
    faults: faults.map(parseFault),
  });
}

describe('embedded pipeline', () => {
  it('stores every event and finding once, even when batches are delivered twice', async () => {
    const sim = job(['slow_rank:rank=20,at=10,slowdown=0.4']);
    const events = [...sim.events()];
    const transport = new MemoryTransport();
    const pipeline = buildPipeline({ transport, store: chdb });
    await pipeline.start();
    for (let i = 0; i < events.length; i += 500) {
      const batches = batchByKey(events.slice(i, i + 500));
      await transport.publish(batches);
      if (i % 2000 === 0) await transport.publish(batches); // redelivery, as after a consumer crash
    }
    await pipeline.stop();
    const counts = await tableCounts(chdb);
    expect(counts.events).toBe(events.length);
    expect(counts.steps).toBe(32 * 60);
    const found = await findingsOf(chdb, sim.opts.job);
    const opens = found.filter((f) => f.state === 'open');
    expect(opens.map((f) => [f.type, f.host, f.gpu])).toEqual([
      ['straggler', sim.faults[0].host, sim.faults[0].gpu],
    ]);
    expect(new Set(found.map((f) => `${f.id}/${f.state}/${f.ts}`)).size).toBe(found.length);
  });

  it('without raw events still stores steps (heatmaps keep working), MFU, findings, faults, checkpoints and job lifecycle', async () => {
    const sim = new ClusterSim({
      ranks: 32,
      steps: 60,
      seed: 2,
      startTs: Date.now() - 600_000,
      checkpointEvery: 20,
      faults: ['slow_rank:rank=20,at=10,slowdown=0.4', 'xid:rank=5,at=30'].map(parseFault),
    });
    const events = [...sim.events()];
    const sparse = events.filter((e) => ['job', 'job_event', 'checkpoint', 'fault'].includes(e.kind));
    // The job this test runs sends each kind the advisor and `rankwatch jobs` read.
    expect(new Set(sparse.map((e) => e.kind))).toEqual(new Set(['job', 'job_event', 'checkpoint', 'fault']));
    const transport = new MemoryTransport();
    const pipeline = buildPipeline({ transport, store: chdb, storeEvents: false });
    await pipeline.start();
    await transport.publish(batchByKey(events));
    await pipeline.stop();
    const counts = await tableCounts(chdb);
    // GPU samples and collectives, the bulk, are not kept.
    expect(counts.events).toBe(sparse.length);
    const [views] = await chdb.query<Record<string, string>>(
      `SELECT (SELECT count() FROM faults) AS faults, (SELECT count() FROM checkpoints) AS checkpoints,
         (SELECT count() FROM job_events) AS lifecycle, (SELECT count() FROM gpu_minute) AS gpu_minutes`,
    );
    expect(Number(views.faults)).toBe(sparse.filter((e) => e.kind === 'fault').length);
    expect(Number(views.checkpoints)).toBe(sparse.filter((e) => e.kind === 'checkpoint').length);
    expect(Number(views.lifecycle)).toBe(
      sparse.filter((e) => e.kind === 'job' || e.kind === 'job_event').length,
    );
    expect(Number(views.gpu_minutes)).toBe(0);
    expect(counts.steps).toBe(32 * 60);
    expect(counts.mfu).toBe(60);
    const heat = await rankHeatmap(chdb, sim.opts.job, {});
    expect(new Set(heat.map((c) => c.rank)).size).toBe(32);
    expect((await findingsOf(chdb, sim.opts.job)).some((f) => f.type === 'straggler')).toBe(true);
  });

  it('sets malformed events aside with their reason and keeps the good ones', async () => {
    const transport = new MemoryTransport();
    const dead: string[] = [];
    const pipeline = buildPipeline({
      transport,
      store: chdb,
      deadLetterSinks: [{ name: 'test', write: (rows) => void dead.push(...rows.map((r) => r.reason)) }],
    });
    await pipeline.start();
    const good = [...job().events()].slice(0, 300);
    await transport.publish([
      {
        key: 'sim-2',
        events: [...good.slice(0, 100), { v: 1, kind: 'step', ts: 1 }, 'not an object', ...good.slice(100)],
      },
    ]);
    await pipeline.stop();
    expect(dead).toEqual(['step: missing field: job', 'not a JSON object']);
    const counts = await tableCounts(chdb);
    expect(counts.events).toBe(300);
    expect(counts.dead_letters).toBe(2);
    const rows = await chdb.query<{ reason: string }>(
      'SELECT reason FROM dead_letters FINAL ORDER BY reason',
    );
    expect(rows.map((r) => r.reason)).toEqual(['not a JSON object', 'step: missing field: job']);
  });

  it('stores events and dead letters as the text they arrived as, when the transport decoded bytes', async () => {
    const pipeline = buildPipeline({ transport: new MemoryTransport(), store: chdb });
    await chdb.migrate();
    const [first, second] = [...job().events()];
    const sent = `${JSON.stringify(first)}\n{ "v": 1,  "kind": "step", "ts": 1 }\n${JSON.stringify(second).replace(',', ', ')}\n`;
    const { events, lines } = decodeBatch(sent);
    await pipeline.handle({ key: 'sim-2', partition: 0, offset: 0, events, lines });
    const raw = await chdb.query<{ raw: string }>('SELECT raw FROM events ORDER BY ts, raw');
    expect(raw.map((r) => r.raw).sort()).toEqual([lines[0], lines[2]].sort());
    const dead = await chdb.query<{ raw: string }>('SELECT raw FROM dead_letters');
    expect(dead).toEqual([{ raw: '{ "v": 1,  "kind": "step", "ts": 1 }' }]);
  });

  it('holds the batch and retries while the store is down, then writes everything', async () => {
    const store = new SwitchableStore(chdb);
    const transport = new MemoryTransport({ maxQueuedBatches: 2 });
    const retries: number[] = [];
    const pipeline = buildPipeline({ transport, store, onStoreRetry: (_e, n) => retries.push(n) });
    await pipeline.start();
    const events = [...job().events()];
    store.down = true;
    let published = 0;
    const producer = (async () => {
      for (let i = 0; i < events.length; i += 200) {
        await transport.publish([{ key: 'sim-2', events: events.slice(i, i + 200) }]);
        published += 200;
      }
    })();
    const until = Date.now() + 20_000;
    while (store.failures < 2 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    expect(store.failures).toBeGreaterThan(1);
    expect(published).toBeLessThan(events.length); // backpressure reached the producer
    store.down = false;
    await producer;
    await pipeline.stop();
    expect(retries.length).toBeGreaterThan(0);
    expect((await tableCounts(chdb)).events).toBe(events.length);
  });

  it('stops within the grace period when the store stays down, saying so, instead of hanging', async () => {
    const store = new SwitchableStore(chdb);
    const transport = new MemoryTransport();
    const pipeline = buildPipeline({ transport, store, stopGraceMs: 300 });
    await pipeline.start();
    store.down = true;
    await transport.publish(batchByKey([...job().events()].slice(0, 500)));
    while (store.failures < 1) await new Promise((r) => setTimeout(r, 10));
    const t = Date.now();
    await expect(pipeline.stop()).rejects.toMatchObject({
      code: 'RANKWATCH_ERR_STORE_UNAVAILABLE',
      message: expect.stringMatching(/stopped without draining.*unacknowledged/),
    });
    expect(Date.now() - t).toBeLessThan(10_000);
    await expect(transport.publish([{ key: 'sim-2', events: [] }])).rejects.toMatchObject({
      code: 'RANKWATCH_ERR_STOPPED',
    });
    expect((await tableCounts(chdb)).events).toBe(0);
  });

  it('close() without draining finishes the batch in hand once the store is back', async () => {
    const store = new SwitchableStore(chdb);
    const transport = new MemoryTransport();
    const pipeline = buildPipeline({ transport, store, stopGraceMs: 60_000 });
    await pipeline.start();
    store.down = true;
    const events = [...job().events()].slice(0, 500);
    await transport.publish([{ key: 'sim-2', events }]);
    while (store.failures < 1) await new Promise((r) => setTimeout(r, 10));
    const closing = pipeline.close();
    setTimeout(() => {
      store.down = false;
    }, 200);
    await closing; // resolves only once the batch in hand is written
    expect((await tableCounts(chdb)).events).toBe(events.length);
  });

  it('sets aside the events the store refuses for good, with its reason, and stores the rest', async () => {
    // A store that refuses (not "is away") any insert holding an event from host "poison", with
    // the engine's own refusal: a row it cannot parse, sent to the real chDB and classified there.
    const refusing = new SwitchableStore(chdb);
    const insert = refusing.insert.bind(refusing);
    refusing.insert = async (batches) => {
      if (batches.some((b) => b.table === 'events' && b.rows.some((r) => r.includes('"host":"poison"'))))
        await chdb.insert([{ table: 'steps', rows: ['{"step":"not a number"}'] }]);
      return insert(batches);
    };
    const dead: string[] = [];
    const transport = new MemoryTransport();
    const pipeline = buildPipeline({
      transport,
      store: refusing,
      deadLetterSinks: [{ name: 'test', write: (r) => void dead.push(...r.map((x) => x.reason)) }],
    });
    await pipeline.start();
    const events = [...job().events()].slice(0, 300);
    const poison = (i: number) => ({ ...(events[i] as object), host: 'poison' }) as (typeof events)[number];
    const sent = events.map((e, i) => (i === 17 || i === 250 ? poison(i) : e));
    await transport.publish([{ key: 'sim-2', events: sent }]);
    await pipeline.stop(); // would hang if the refused batch were retried forever
    const counts = await tableCounts(chdb);
    expect(counts.events).toBe(298);
    expect(counts.dead_letters).toBe(2);
    expect(dead).toHaveLength(2);
    for (const reason of dead)
      expect(reason).toMatch(/^the store refused it: chDB at .*: insert into steps failed: Code: 27\./);
    const raws = await chdb.query<{ raw: string }>('SELECT raw FROM dead_letters FINAL');
    expect(raws.map((r) => JSON.parse(r.raw).host)).toEqual(['poison', 'poison']);
    expect(pipeline.counters()).toMatchObject({ events: 298, dead_letters: 2 });
  });

  it('an idle bus moves the quiet-job clock on: a job that stops sending steps ends and its findings resolve', async () => {
    // 20 ms steps and no floor, so "no step for 10 steps" is 200 ms of event time after the last one.
    const sim = new ClusterSim({
      ranks: 32,
      steps: 80,
      seed: 2,
      stepMs: 20,
      stallProb: 0,
      checkpointEvery: 0,
      startTs: Date.now() - 60_000,
      faults: [parseFault('slow_rank:rank=20,at=10,slowdown=0.4')],
    });
    const events = [...sim.events()].filter((e) => !(e.kind === 'job_event' && e.event === 'finished'));
    const lifecycle = {
      ...LIFECYCLE_DEFAULTS,
      staleAfterSteps: 5,
      staleFloorMs: 0,
      endAfterSteps: 10,
      endFloorMs: 0,
    };
    const transport = new MemoryTransport();
    const pipeline = buildPipeline({
      transport,
      store: chdb,
      detectors: { lifecycle },
      idleAdvanceMs: 50,
    });
    await pipeline.start();
    await transport.publish(batchByKey(events));
    await transport.drain();
    const open = () => findingsOf(chdb, sim.opts.job);
    const deadline = Date.now() + 10_000;
    let found = await open();
    while (!found.some((f) => f.state === 'resolved' && f.type === 'straggler') && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      found = await open();
    }
    // 20 ms steps make the job's MFU implausible: that note resolves with the job too; the straggler is the point here.
    const resolved = found.filter((f) => f.state === 'resolved' && f.type === 'straggler');
    expect(resolved.map((f) => [f.type, f.host, f.gpu, f.evidence.resolved_reason])).toEqual([
      ['straggler', sim.faults[0].host, sim.faults[0].gpu, 'job_quiet'],
    ]);
    const lastStep = Math.max(...events.filter((e) => e.kind === 'step').map((e) => e.ts));
    expect(resolved[0].ts).toBeGreaterThan(lastStep);
    expect(resolved[0].ts).toBeLessThan(lastStep + 1_000);
    await pipeline.stop();
  });
});

describe('Kafka deliveries', () => {
  it('gives each delivery its own dead letters, with the offset of the message each came from', async () => {
    await chdb.migrate();
    const good = [...job().events()].slice(0, 40);
    const bad = { v: 1, kind: 'step', ts: 1 };
    const pipeline = buildPipeline({ transport: new MemoryTransport(), store: chdb });
    const a = pipeline.handle({
      key: 'sim-2',
      partition: 1,
      offset: 21,
      topic: 'rw.events',
      events: [...good.slice(0, 10), ...good.slice(10, 20), bad],
      undecodable: [{ raw: 'garbage', reason: 'line 2: not JSON' }],
      messages: [
        { offset: 20, events: 10, undecodable: 0 },
        { offset: 21, events: 11, undecodable: 1 },
      ],
    });
    const b = pipeline.handle({
      key: 'sim-2',
      partition: 1,
      offset: 22,
      topic: 'rw.events',
      events: [bad, ...good.slice(20)],
      messages: [{ offset: 22, events: 21, undecodable: 0 }],
    });
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra.deadLetters.map((d) => [d.reason, d.partition, d.offset])).toEqual([
      ['line 2: not JSON', 1, 21],
      ['step: missing field: job', 1, 21],
    ]);
    expect(rb.deadLetters.map((d) => [d.reason, d.offset])).toEqual([['step: missing field: job', 22]]);
    // The counters equal the tables.
    const counts = await tableCounts(chdb);
    expect(pipeline.counters()).toMatchObject({ events: counts.events, dead_letters: 3 });
    expect(counts.events).toBe(40);
  });
});
