/**
 * NCCL Inspector through the edge reduction: what one node's collector puts on the wire per GPU
 * per second before (one event per operation Inspector reports) and after (one per rank, step,
 * communicator and op), and what the parse and reduction cost in CPU against JSON.parse of the
 * same dump lines.
 *
 * The workload is one node (8 GPUs) of a Megatron-style 70B run with tp 8, pp 4, sequence
 * parallelism and the distributed optimizer, 20 layers per stage, 8 micro-batches per step, a
 * step every 5 s: per GPU and step, 4 tensor-parallel all-gathers or reduce-scatters per layer
 * and micro-batch in each direction (1,280), a send and a recv to each pipeline neighbour per
 * micro-batch in each direction (32), and 20 gradient reduce-scatter and 20 parameter all-gather
 * buckets over data parallelism (40).
 */
import { gzipSync } from 'node:zlib';
import { InspectorJsonReader } from '../collectors/parsers/nccl_inspector.js';
import { inspectorLine } from '../collectors/parsers/nccl_inspector_format.js';
import { RankMap } from '../collectors/ranks.js';
import { CollectiveReducer, REDUCER_DEFAULTS } from '../collectors/reduce.js';
import type { CollectiveEvent } from '../schema/events.js';
import { loadNote, measure, rate, type Section } from './harness.js';

const GPUS = 8;
const STEPS = 24;
const STEP_MS = 5000;
const LAYERS = 20;
const MICRO = 8;
const T0 = Date.UTC(2026, 3, 17, 8);
const HOST = 'gpu-node-07';

interface Op {
  func: string;
  comm: string;
  nranks: number;
  commRank: number;
  bytes: number;
  peer?: number;
}

/** One GPU's operations in one step, in order. */
function stepOps(gpu: number): Op[] {
  const ops: Op[] = [];
  const tp = { comm: `0x7a11${gpu >> 3}`, nranks: 8, commRank: gpu };
  const act = 4096 * 8192 * 2; // a micro-batch's activations, bf16
  for (const dir of [0, 1])
    for (let m = 0; m < MICRO; m++)
      for (let l = 0; l < LAYERS; l++)
        for (let k = 0; k < 4; k++)
          ops.push({ ...tp, func: (k + dir) % 2 === 0 ? 'AllGather' : 'ReduceScatter', bytes: act });
  for (const dir of [0, 1])
    for (let m = 0; m < MICRO; m++)
      for (const func of ['Send', 'Recv'])
        ops.push({
          func,
          comm: `0x9900${gpu}${dir}`,
          nranks: 2,
          commRank: dir,
          peer: 1 - dir,
          bytes: act / 8,
        });
  for (const func of ['ReduceScatter', 'AllGather'])
    for (let b = 0; b < 20; b++)
      ops.push({ func, comm: `0x5d00${gpu}`, nranks: 16, commRank: 3, bytes: 40 << 20 });
  return ops;
}

/** The dump files' lines (all GPUs, in time order) and the hooks' step events. */
function workload() {
  const lines: string[] = [];
  const steps: Record<string, unknown>[] = [];
  const seq = new Map<string, number>();
  for (let s = 0; s < STEPS; s++) {
    for (let g = 0; g < GPUS; g++) {
      const ops = stepOps(g);
      ops.forEach((op, i) => {
        const k = `${g}/${op.comm}/${op.func}`;
        const n = (seq.get(k) ?? 0) + 1;
        seq.set(k, n);
        const execUs = 150 + ((i * 37 + g) % 90);
        lines.push(
          inspectorLine({
            ...op,
            nnodes: 4,
            hostname: HOST,
            pid: 30_000 + g,
            dumpUs: (T0 + s * STEP_MS + Math.floor(((i + 1) / (ops.length + 1)) * STEP_MS)) * 1000,
            seq: n,
            execUs,
            algobwGbs: op.bytes / execUs / 1e3,
            busbwGbs: op.bytes / execUs / 1e3,
          }),
        );
      });
      steps.push({
        v: 1,
        kind: 'step',
        ts: T0 + (s + 1) * STEP_MS,
        job: 'llama-70b',
        rank: g,
        host: HOST,
        gpu: g,
        pid: 30_000 + g,
        step: s,
        step_ms: STEP_MS,
        compute_ms: 4000,
      });
    }
  }
  return { lines, steps };
}

/** Parses and reduces the lines as the source does; returns the events sent. */
function reduce(lines: string[], steps: Record<string, unknown>[]): CollectiveEvent[] {
  let now = 0;
  const out: CollectiveEvent[] = [];
  const ranks = new RankMap({ localHosts: [HOST] });
  const reducer = new CollectiveReducer({
    ranks,
    ...REDUCER_DEFAULTS,
    emit: (e) => out.push(...e),
    drop: (reason) => {
      throw new Error(`bench workload dropped records: ${reason}`);
    },
    now: () => now,
  });
  const reader = new InspectorJsonReader();
  const perStep = lines.length / STEPS;
  for (let s = 0; s < STEPS; s++) {
    for (let i = s * perStep; i < (s + 1) * perStep; i++) {
      const r = reader.push(lines[i], i + 1);
      if (r.op) reducer.add(r.op, now);
    }
    ranks.learn(steps.slice(s * GPUS, (s + 1) * GPUS));
    now += STEP_MS;
    reducer.tick(now);
  }
  reducer.flush(now);
  return out;
}

/** gzip bytes per second of these events, batched per second of event time as the collector sends them. */
function wireBytesPerSecond(events: { ts: number }[], seconds: number): number {
  const batches = new Map<number, string[]>();
  for (const e of events) {
    const k = Math.floor(e.ts / 1000);
    const b = batches.get(k) ?? [];
    b.push(JSON.stringify(e));
    batches.set(k, b);
  }
  let bytes = 0;
  for (const b of batches.values()) bytes += gzipSync(b.join('\n')).length;
  return bytes / seconds;
}

export async function inspectorBench(): Promise<Section> {
  const note = loadNote();
  const { lines, steps } = workload();
  const seconds = STEPS * (STEP_MS / 1000);
  const reduced = reduce(lines, steps);
  // Before: every operation shipped as its own collective event (count 1).
  const raw: CollectiveEvent[] = [];
  const reader = new InspectorJsonReader();
  for (let i = 0; i < lines.length; i++) {
    const o = reader.push(lines[i], i + 1).op!;
    raw.push({
      v: 1,
      kind: 'collective',
      ts: Math.round(o.tMs),
      job: 'llama-70b',
      rank: o.pid! - 30_000,
      host: HOST,
      gpu: o.pid! - 30_000,
      step: 0,
      op: o.op,
      comm: o.comm,
      nranks: o.nranks,
      bytes: o.bytes,
      dur_ms: o.execUs / 1000,
      seq: o.seq,
    });
  }
  const before = raw.length / GPUS / seconds;
  const after = reduced.length / GPUS / seconds;
  // One GPU's events, for the gzip figures.
  const bytesBefore = wireBytesPerSecond(
    raw.filter((e) => e.rank === 0),
    seconds,
  );
  const bytesAfter = wireBytesPerSecond(
    reduced.filter((e) => e.rank === 0),
    seconds,
  );

  const baseline = measure('JSON.parse of the dump lines', lines.length, 'records', () => {
    for (const l of lines) JSON.parse(l);
  });
  const full = measure(
    'parse + map + reduce (the source, minus file reading)',
    lines.length,
    'records',
    () => {
      reduce(lines, steps);
    },
  );
  return {
    title: 'NCCL Inspector: events on the wire per GPU, before and after the edge reduction',
    what: `One node (${GPUS} GPUs) of a Megatron-style 70B run (tp 8, pp 4, sequence parallel, distributed optimizer; 20 layers per stage, 8 micro-batches, a step every ${STEP_MS / 1000} s): ${(lines.length / GPUS / STEPS).toLocaleString('en-US')} operations per GPU and step as NCCL Inspector writes them, ${STEPS} steps, read by the nccl_inspector parser, mapped to ranks by the hooks' step events and reduced per rank, step, communicator and op.`,
    baseline,
    rows: [full],
    notes: [
      `On the wire, per GPU: **${before.toFixed(1)} events/s before** the reduction (one per operation), **${after.toFixed(2)} events/s after** (one per rank, step, communicator and op): ${(before / after).toFixed(0)}x fewer. Gzipped in one-second batches: ${Math.round(bytesBefore).toLocaleString('en-US')} B/s before, ${Math.round(bytesAfter).toLocaleString('en-US')} B/s after per GPU.`,
      `For a 100,000-GPU job: ${((before * 1e5) / 1e6).toFixed(1)} M events/s before, ${Math.round((after * 1e5) / 1000).toLocaleString('en-US')} k events/s after.`,
      `The collector's CPU for it: ${((lines.length / seconds / rate(full)) * 100).toFixed(2)}% of one core for the node's ${GPUS} GPUs at this rate (file reading and HTTP not included).`,
      note,
    ],
  };
}
