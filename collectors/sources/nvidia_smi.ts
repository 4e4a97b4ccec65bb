/** Runs `nvidia-smi --query-gpu … -lms N` and turns its CSV stream into gpu events (where no exporter runs). */
import { Type } from '@sinclair/typebox';
import { DEFAULT_QUERY, NvidiaSmiParser } from '../parsers/nvidia_smi.js';
import { type SourceFactory, sourceName } from '../source.js';
import { commandLines } from './lines.js';

const schema = Type.Object(
  {
    type: Type.Literal('nvidia_smi'),
    name: Type.Optional(Type.String()),
    command: Type.String({ default: 'nvidia-smi', description: 'the nvidia-smi binary' }),
    intervalMs: Type.Integer({ minimum: 100, default: 1000, description: 'sampling interval (-lms)' }),
    query: Type.Array(Type.String(), { default: DEFAULT_QUERY, description: '--query-gpu fields' }),
    job: Type.Optional(Type.String({ description: 'job to tag every GPU of this node with' })),
  },
  { additionalProperties: false },
);

export const nvidiaSmi: SourceFactory<typeof schema> = {
  type: 'nvidia_smi',
  description:
    'GPU clocks, power, temperature and clock-event reasons from nvidia-smi; fills the PCI bus map',
  schema,
  create(cfg, deps) {
    const name = sourceName('nvidia_smi', cfg.name);
    const parser = new NvidiaSmiParser(deps.host, cfg.query);
    const args = [
      `--query-gpu=${cfg.query.join(',')}`,
      '--format=csv,noheader,nounits',
      `-lms`,
      String(cfg.intervalMs),
    ];
    const input = commandLines(name, cfg.command, args, deps, (line) => {
      const r = parser.push(line, deps.now());
      if (r.pci) deps.pciMap.set(r.pci.busId, r.pci.gpu);
      if (r.problem) deps.parseProblems(name, [r.problem]);
      if (r.event) deps.emit([cfg.job ? { ...r.event, job: cfg.job } : r.event]);
    });
    return { type: 'nvidia_smi', name, start: input.start, stop: input.stop };
  },
};
