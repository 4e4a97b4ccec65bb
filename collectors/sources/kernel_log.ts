/**
 * NVRM XID lines from the kernel log: the journal (`journalctl -k -f`), /dev/kmsg, or a file
 * (tailed). GPUs come from the PCI bus map (config, the nvidia_smi source, or one nvidia-smi call
 * at start).
 */
import { execFile } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { Type } from '@sinclair/typebox';
import { parseKernelLine } from '../parsers/kernel_xid.js';
import { normalizePciBusId } from '../parsers/nvidia_smi.js';
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
    let lineNo = 0;
    const onLine = (line: string) => {
      const r = parseKernelLine(line, ++lineNo, deps.now(), { host: deps.host, pciToGpu: deps.pciMap });
      if ('problem' in r) deps.parseProblems(name, [r.problem]);
      else if ('event' in r) deps.emit([cfg.job ? { ...r.event, job: cfg.job } : r.event]);
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
        if (deps.pciMap.size === 0) learnPciMap(deps.pciMap);
        input.start();
      },
      stop: () => input.stop(),
    };
  },
};

/** One nvidia-smi call for the bus map; silently nothing where nvidia-smi is absent. */
function learnPciMap(map: Map<string, number>): void {
  execFile(
    'nvidia-smi',
    ['--query-gpu=index,pci.bus_id', '--format=csv,noheader'],
    { timeout: 10_000 },
    (err, out) => {
      if (err) return;
      for (const line of out.split('\n')) {
        const [i, bus] = line.split(',').map((s) => s.trim());
        if (bus && Number.isInteger(Number(i))) map.set(normalizePciBusId(bus), Number(i));
      }
    },
  );
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
