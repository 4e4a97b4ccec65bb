/**
 * What reading an ingest body as a stream costs per event in CPU, against the whole-body path it
 * replaced (gunzip to one string, split, parse and validate each line): gzip bodies of a simulated
 * job's events, 5,000 per request as collectors send them, and of tiny job lifecycle lines at the
 * events limit (50,000), the stream given in 64 KiB chunks as a socket gives them. Both in this
 * process, in turn, best of 5. CPU time, not wall time: the gunzip stream runs on another thread,
 * which would flatter the streamed path's wall time on an idle machine.
 */
import { Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import { validateEvent } from '../schema/validate.js';
import { ClusterSim } from '../sim/cluster.js';
import { decodeBatch, encodeLines, inflateText } from '../stream/codec.js';
import { readIngestBody } from '../stream/ingest-body.js';
import { loadNote, type Measurement, type Section } from './harness.js';

/** The check an ingest body got before it was read as a stream (all of it in memory at once). */
function wholeBody(raw: Buffer): number {
  const t = inflateText(raw, 256 << 20);
  if ('error' in t) throw new Error(t.error);
  const d = decodeBatch(t.text);
  let good = 0;
  for (const e of d.events) if (validateEvent(e).ok) good++;
  return good;
}

async function streamed(raw: Buffer): Promise<number> {
  const chunks: Buffer[] = [];
  for (let i = 0; i < raw.length; i += 65536) chunks.push(raw.subarray(i, i + 65536));
  const r = await readIngestBody(Readable.from(chunks));
  if (!r.ok) throw new Error(r.message);
  r.release();
  return r.good.length;
}

/** CPU time of `fn` (all threads: the gunzip stream runs on libuv's pool), best of `runs` after a warm-up. */
async function cpuMs(fn: () => unknown, runs = 5): Promise<number> {
  await fn();
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < runs; i++) {
    const t = process.cpuUsage();
    await fn();
    const d = process.cpuUsage(t);
    best = Math.min(best, (d.user + d.system) / 1000);
  }
  return best;
}

async function pair(label: string, bodies: Buffer[], events: number): Promise<[Measurement, Measurement]> {
  const whole: Measurement = {
    name: `${label}: whole body (before)`,
    items: events,
    unit: 'events',
    bestMs: await cpuMs(() => {
      for (const b of bodies) wholeBody(b);
    }),
  };
  const stream: Measurement = {
    name: `${label}: streamed`,
    items: events,
    unit: 'events',
    bestMs: await cpuMs(async () => {
      for (const b of bodies) await streamed(b);
    }),
    baseline: whole,
  };
  return [whole, stream];
}

export async function ingestBench(): Promise<Section> {
  const sim = [...new ClusterSim({ ranks: 256, steps: 40 }).events()];
  const perRequest = 5_000;
  const simBodies: Buffer[] = [];
  for (let i = 0; i + perRequest <= sim.length; i += perRequest)
    simBodies.push(gzipSync(encodeLines(sim.slice(i, i + perRequest))));
  const tiny = Array.from(
    { length: 50_000 },
    (_, j) => `{"v":1,"kind":"job_event","ts":${1_764_480_000_000 + j},"job":"j${j % 8}","event":"start"}\n`,
  ).join('');
  const tinyBodies = [gzipSync(tiny), gzipSync(tiny)];
  const [simWhole, simStream] = await pair(
    `simulated job, ${perRequest.toLocaleString('en-US')} events a body`,
    simBodies,
    simBodies.length * perRequest,
  );
  const [tinyWhole, tinyStream] = await pair('job lifecycle lines, 50,000 a body', tinyBodies, 100_000);
  return {
    title: 'Ingest body: read as a stream against read whole',
    what:
      'CPU per event (all threads, "per second" is events per CPU-second): gunzip, split into lines, `JSON.parse` and validate, as POST /v1/ingest does before it publishes. ' +
      `"whole body" is the path before bodies were streamed (gunzip to one string, then split); "streamed" reads 64 KiB chunks through a gunzip stream, bounded per request and giving the event loop back every 8 ms. ${simBodies.length} bodies of a simulated 256-rank job (${(simBodies[0].length / 1024).toFixed(0)} KiB gzip each), then 2 bodies of 50,000 tiny lines (${(tinyBodies[0].length / 1024).toFixed(0)} KiB gzip each); best of 5, in turn.`,
    baseline: simWhole,
    rows: [simStream, { ...tinyWhole, baseline: simWhole }, tinyStream],
    notes: [loadNote()],
  };
}
