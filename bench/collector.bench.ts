/**
 * The collector's CPU cost on one node: 8 GPUs scraped from dcgm-exporter at 1 Hz plus one
 * Megatron iteration line per second, end to end on the CPU (parse the exposition text, build
 * events, batch by key, JSON-encode and gzip as the HTTP publisher does). Measured flat out,
 * then turned into the figure that matters: events/s per percent of one core, and the share of
 * a core the live rate (9 events/s) costs. Baseline: JSON.parse of the same events' lines.
 */
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { type DcgmState, dcgmToEvents } from '../collectors/parsers/dcgm.js';
import { MegatronParser } from '../collectors/parsers/megatron.js';
import { encodeLines } from '../stream/codec.js';
import { batchByKey } from '../stream/transport.js';
import { measure, rate, type Section } from './harness.js';

const GPUS = 8;
const SECONDS = 2000;

/** One dcgm-exporter scrape of 8 GPUs with the default fields plus clock reasons, Kubernetes labels. */
function scrape(second: number): string {
  const fields: [string, (g: number) => number][] = [
    ['DCGM_FI_DEV_SM_CLOCK', (g) => 1980 - ((g + second) % 3) * 15],
    ['DCGM_FI_DEV_MEM_CLOCK', () => 2619],
    ['DCGM_FI_DEV_GPU_TEMP', (g) => 60 + g],
    ['DCGM_FI_DEV_MEMORY_TEMP', (g) => 50 + g],
    ['DCGM_FI_DEV_POWER_USAGE', (g) => 600 + g * 1.5],
    ['DCGM_FI_DEV_GPU_UTIL', () => 100],
    ['DCGM_FI_DEV_MEM_COPY_UTIL', () => 40],
    ['DCGM_FI_PROF_PIPE_TENSOR_ACTIVE', () => 0.41],
    ['DCGM_FI_PROF_GR_ENGINE_ACTIVE', () => 0.98],
    ['DCGM_FI_DEV_CLOCKS_EVENT_REASONS', () => 0],
    ['DCGM_FI_DEV_XID_ERRORS', () => 0],
    ['DCGM_FI_DEV_ECC_DBE_VOL_TOTAL', () => 0],
    ['DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS', () => 0],
    ['DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS', () => 0],
  ];
  let out = '';
  for (const [name, value] of fields) {
    out += `# HELP ${name} help text.\n# TYPE ${name} gauge\n`;
    for (let g = 0; g < GPUS; g++)
      out += `${name}{gpu="${g}",UUID="GPU-5f1c6a3e-9d1b-4c2e-8f7a-0a1b2c3d4e5${g}",pci_bus_id="00000000:1${g}:00.0",device="nvidia${g}",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-0017",DCGM_FI_DRIVER_VERSION="550.54.15",container="trainer",namespace="llm",pod="llama-70b-worker-3"} ${value(g)}\n`;
  }
  return out;
}

const iteration = (i: number) =>
  ` [2026-11-30 05:01:40] iteration ${String(i).padStart(8)}/  500000 | consumed samples: ${String(i * 512).padStart(12)} | elapsed time per iteration (ms): 1000.${i % 10} | throughput per GPU (TFLOP/s/GPU): 401.2 | learning rate: 2.999999E-04 | global batch size:   512 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.567 | number of skipped iterations:   0 | number of nan iterations:   0 |`;

export async function collectorBench(): Promise<Section> {
  const scrapes = Array.from({ length: 16 }, (_, s) => scrape(s));
  const lines = Array.from({ length: SECONDS }, (_, i) => iteration(i + 1));
  const ctx = { job: 'llama-70b', rank: 0, host: 'gpu-0017', gpu: 0, seqLen: 4096 };
  const eventsPerSecond = GPUS + 1;
  const n = SECONDS * eventsPerSecond;

  // The same events as JSON lines, for the baseline.
  const sample: string[] = [];
  {
    const state: DcgmState = new Map();
    const p = new MegatronParser(ctx);
    for (let s = 0; s < SECONDS; s++) {
      for (const e of dcgmToEvents(scrapes[s % 16], s * 1000, { host: 'gpu-0017' }, state).events)
        sample.push(JSON.stringify(e));
      for (const e of p.push(lines[s], s * 1000).events) sample.push(JSON.stringify(e));
    }
  }
  const baseline = measure('JSON.parse of the same events', sample.length, 'events', () => {
    for (const l of sample) JSON.parse(l);
  });
  const parse = measure('parse dcgm text + Megatron lines → events', n, 'events', () => {
    const state: DcgmState = new Map();
    const p = new MegatronParser(ctx);
    for (let s = 0; s < SECONDS; s++) {
      dcgmToEvents(scrapes[s % 16], s * 1000, { host: 'gpu-0017' }, state);
      p.push(lines[s], s * 1000);
    }
  });
  const full = measure('… + batch by key, encode, gzip (1 s batches, as sent)', n, 'events', () => {
    const state: DcgmState = new Map();
    const p = new MegatronParser(ctx);
    for (let s = 0; s < SECONDS; s++) {
      const events: unknown[] = [
        ...dcgmToEvents(scrapes[s % 16], s * 1000, { host: 'gpu-0017' }, state).events,
      ];
      events.push(...p.push(lines[s], s * 1000).events);
      for (const b of batchByKey(events)) gzipSync(encodeLines(b.events));
    }
  });
  const perPct = rate(full) / 100;
  const live = await liveCpu(20);
  return {
    title: 'Collector CPU cost (8 GPUs × 1 Hz telemetry + 1 step/s)',
    what: `One node's collector work, flat out on one core: ${SECONDS} seconds of input (a dcgm-exporter scrape of ${GPUS} GPUs with 14 fields and Kubernetes labels, and one Megatron iteration line per second), parsed into v1 events, batched per second by key, JSON-encoded and gzipped as the HTTP publisher sends them.`,
    baseline,
    rows: [parse, full],
    notes: [
      `${Math.round(perPct).toLocaleString('en-US')} events/s per percent of one core end to end; at the live rate of ${eventsPerSecond} events/s the collector's parsing and encoding cost about ${((eventsPerSecond / rate(full)) * 100).toFixed(3)}% of a core (HTTP and timers not included).`,
      live
        ? `Live: \`rankwatch collect\` as a process (dcgm-exporter served locally for 8 GPUs, a Megatron log growing by one line a second, HTTP to a local sink) used ${live.cpuPct.toFixed(2)}% of a core over ${live.seconds} s after warm-up, sending ${live.events} events (${(live.events / live.seconds).toFixed(1)}/s): timers, HTTP and the runtime included.`
        : 'Live process measurement skipped (needs Linux /proc).',
      'Parsing the exposition text dominates (14 fields × 8 GPUs = 112 sample lines with long label sets per scrape, for 8 events); batching, encoding and gzip add little on top.',
    ],
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** CPU seconds (user + system) of a process, from /proc (clock ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** Runs the real collector for `seconds` against local servers and measures its CPU use. */
async function liveCpu(
  seconds: number,
): Promise<{ cpuPct: number; seconds: number; events: number } | undefined> {
  const bin = join(import.meta.dirname, '..', '..', 'bin', 'rankwatch.js');
  if (!existsSync('/proc/self/stat') || !existsSync(bin)) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-bench-'));
  let events = 0;
  let tick = 0;
  const sink = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (d: Buffer) => parts.push(d));
    req.on('end', () => {
      const text = gunzipSync(Buffer.concat(parts)).toString();
      const n = text.split('\n').filter(Boolean).length;
      events += n;
      res.writeHead(200, { 'content-type': 'application/json' }).end(`{"accepted":${n},"rejected":0}`);
    });
  });
  const exporter = createServer((_req, res) => res.writeHead(200).end(scrape(tick)));
  const listen = (s: ReturnType<typeof createServer>) =>
    new Promise<number>((r) => s.listen(0, '127.0.0.1', () => r((s.address() as { port: number }).port)));
  const [sinkPort, exporterPort] = [await listen(sink), await listen(exporter)];
  const log = join(dir, 'train.log');
  writeFileSync(log, '');
  const child = spawn(
    process.execPath,
    [
      bin,
      'collect',
      '--bus',
      `http://127.0.0.1:${sinkPort}`,
      '--dcgm',
      `http://127.0.0.1:${exporterPort}/metrics`,
      '--megatron-log',
      log,
      '--job',
      'bench',
      '--host',
      'gpu-0017',
    ],
    { stdio: 'ignore' },
  );
  const writer = setInterval(() => appendFileSync(log, `${iteration(++tick)}\n`), 1000);
  try {
    await sleep(4000);
    const cpu0 = cpuSeconds(child.pid!);
    const ev0 = events;
    const t0 = performance.now();
    await sleep(seconds * 1000);
    const cpu = cpuSeconds(child.pid!) - cpu0;
    const wall = (performance.now() - t0) / 1000;
    return { cpuPct: (cpu / wall) * 100, seconds: Math.round(wall), events: events - ev0 };
  } finally {
    clearInterval(writer);
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    sink.close();
    exporter.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
