/**
 * NVRM XID lines from the kernel log: the journal (`journalctl -k -f`), /dev/kmsg, or a file
 * (tailed). GPUs come from the PCI bus map (config, the nvidia_smi source, or nvidia-smi's
 * pci.bus_id query at start and again whenever a fault names a bus id the map lacks, so faults of
 * two unmapped GPUs never look like one). Boot-relative stamps ([secs], kmsg µs) are placed in
 * time through this boot's start (/proc/uptime).
 */
import { execFile } from 'node:child_process';
import { createReadStream, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Type } from '@sinclair/typebox';
import { KernelLogParser } from '../parsers/kernel_xid.js';
import { normalizePciBusId } from '../parsers/nvidia_smi.js';
import { parseRfc3339 } from '../parsers/problems.js';
import { backoffMs, type SourceFactory, sourceName } from '../source.js';
import { commandLines, type LineInput, tailLines } from './lines.js';

const schema = Type.Object(
  {
    type: Type.Literal('kernel_log'),
    name: Type.Optional(Type.String()),
    mode: Type.Union([Type.Literal('journal'), Type.Literal('kmsg'), Type.Literal('file')], {
      default: 'journal',
      description: 'journal (journalctl -k -f), kmsg (/dev/kmsg, needs root), or file (tailed)',
    }),
    path: Type.String({ default: '/var/log/kern.log', description: 'file to tail (mode file)' }),
    from: Type.Union([Type.Literal('start'), Type.Literal('end')], { default: 'end' }),
    pollMs: Type.Integer({ minimum: 50, default: 1000 }),
    pciMap: Type.Record(Type.String(), Type.Integer({ minimum: 0 }), {
      default: {},
      description: 'PCI bus id → GPU index, e.g. {"0000:3b:00": 2}; else learnt from nvidia-smi',
    }),
    job: Type.Optional(Type.String()),
    bootTime: Type.Optional(
      Type.String({
        description:
          'when the log\'s boot began (RFC3339), to date dmesg "[secs]" stamps of a saved log; kmsg uses this boot\'s, a file none (its [secs] lines get the read time)',
      }),
    ),
  },
  { additionalProperties: false },
);

export const kernelLog: SourceFactory<typeof schema> = {
  type: 'kernel_log',
  description: 'XID faults from the kernel log, mapped to GPUs through the PCI bus id',
  schema,
  create(cfg, deps) {
    const name = sourceName('kernel_log', cfg.name);
    for (const [bus, gpu] of Object.entries(cfg.pciMap)) deps.pciMap.set(normalizePciBusId(bus), gpu);
    // Boot-relative stamps need the boot they count from: this one for kmsg; for a file only when
    // given (a saved log may come from another boot, and a wrong date is worse than the read time).
    const boot = cfg.bootTime ? parseRfc3339(cfg.bootTime) : undefined;
    if (cfg.bootTime && !Number.isFinite(boot))
      deps.logger.warn(
        `${name}: bootTime "${cfg.bootTime}" is not an RFC3339 time (e.g. 2026-11-30T00:00:00Z); ignored`,
      );
    const parser = new KernelLogParser({
      host: deps.host,
      pciToGpu: deps.pciMap,
      bootTimeMs: Number.isFinite(boot) ? boot : cfg.mode === 'kmsg' ? bootTime(deps.now()) : undefined,
    });
    const learn = relearner(deps.pciMap);
    let lineNo = 0;
    const emit = (e: Record<string, unknown>) => deps.emit([cfg.job ? { ...e, job: cfg.job } : e]);
    const onResult = (r: ReturnType<typeof parser.push>[number]) => {
      if ('problem' in r) deps.parseProblems(name, [r.problem]);
      else if ('event' in r) {
        const e = r.event;
        const bus = e.pci_bus_id as string | undefined;
        if (e.gpu !== undefined || !bus) return emit(e);
        // An unknown bus id: ask nvidia-smi again (a GPU may have come back, or the map was never
        // learnt), then send the fault with its GPU if found, else with its bus id alone.
        void learn(bus).then(() => {
          const gpu = deps.pciMap.get(bus);
          emit(gpu === undefined ? e : { ...e, gpu });
        });
      }
    };
    // A held-back line (an Xid 154 whose action may wrap) waits at most a second for the next one.
    let quiet: NodeJS.Timeout | undefined;
    const onLine = (line: string) => {
      clearTimeout(quiet);
      for (const r of parser.push(line, ++lineNo, deps.now())) onResult(r);
      if (parser.holding) quiet = setTimeout(() => parser.flush().forEach(onResult), 1000);
    };
    let input: LineInput;
    if (cfg.mode === 'file') input = tailLines(name, cfg, deps, (lines) => lines.forEach(onLine));
    else if (cfg.mode === 'journal')
      input = commandLines(name, 'journalctl', ['-k', '-f', '-n', '0', '-o', 'short-iso'], deps, onLine);
    else input = kmsgLines(name, deps, onLine);
    return {
      type: 'kernel_log',
      name,
      start: () => {
        if (deps.pciMap.size === 0) void learn();
        input.start();
      },
      stop: async () => {
        await input.stop();
        clearTimeout(quiet);
        for (const r of parser.flush()) onResult(r);
      },
    };
  },
};

/** One nvidia-smi call for the bus map; silently nothing where nvidia-smi is absent. */
function learnPciMap(map: Map<string, number>): Promise<void> {
  return new Promise((resolve) =>
    execFile(
      'nvidia-smi',
      ['--query-gpu=index,pci.bus_id', '--format=csv,noheader'],
      { timeout: 10_000 },
      (err, out) => {
        if (!err)
          for (const line of out.split('\n')) {
            const [i, bus] = line.split(',').map((s) => s.trim());
            if (bus && i !== '' && Number.isInteger(Number(i))) map.set(normalizePciBusId(bus), Number(i));
          }
        resolve();
      },
    ),
  );
}

/**
 * Learns the map again for a bus id it lacks, at most once per bus per `everyMs` (a burst of
 * faults from one unknown bus asks once); callers during a running query wait for it.
 */
function relearner(map: Map<string, number>, everyMs = 30_000): (bus?: string) => Promise<void> {
  const asked = new Map<string, number>();
  let running: Promise<void> | undefined;
  return async (bus = '') => {
    while (running) await running;
    if (bus && map.has(bus)) return;
    if (Date.now() - (asked.get(bus) ?? Number.NEGATIVE_INFINITY) < everyMs) return;
    asked.set(bus, Date.now());
    running = learnPciMap(map).finally(() => {
      running = undefined;
    });
    await running;
  };
}

/** This boot's start in epoch ms (from /proc/uptime); undefined off Linux. */
function bootTime(now: number): number | undefined {
  try {
    const up = Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
    return Number.isFinite(up) ? now - up * 1000 : undefined;
  } catch {
    return undefined;
  }
}

/** /dev/kmsg records ("level,seq,usec,-;text"); opening it replays the ring buffer first. Reopened with backoff on error. */
function kmsgLines(
  name: string,
  deps: Parameters<typeof kernelLog.create>[1],
  onLine: (l: string) => void,
): LineInput {
  let stopped = false;
  let failures = 0;
  let stream: ReturnType<typeof createReadStream> | undefined;
  let timer: NodeJS.Timeout | undefined;
  const run = () => {
    if (stopped) return;
    const s = createReadStream('/dev/kmsg', { encoding: 'utf8' });
    stream = s;
    createInterface({ input: s }).on('line', (l) => {
      failures = 0;
      onLine(l);
    });
    s.on('error', (err) => {
      deps.sourceError(name, err);
      failures++;
      if (!stopped) timer = setTimeout(run, backoffMs(failures));
    });
  };
  return {
    start: run,
    stop: async () => {
      stopped = true;
      clearTimeout(timer);
      stream?.destroy();
    },
  };
}
