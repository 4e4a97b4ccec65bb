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
    // The query as this driver accepts it: a field it rejects is renamed or dropped, and that is
    // remembered for every restart of the command.
    let query = [...cfg.query];
    let parser = new NvidiaSmiParser(deps.host, query);
    let changed = false;
    const args = () => [
      `--query-gpu=${query.join(',')}`,
      '--format=csv,noheader,nounits',
      `-lms`,
      String(cfg.intervalMs),
    ];
    /** nvidia-smi's answer to a field this driver does not know; true when the line was one. */
    const rejected = (line: string): boolean => {
      const field = INVALID_FIELD.exec(line)?.[1];
      if (!field || !query.includes(field)) return false;
      const older = OLDER_NAME[field];
      query =
        older && !query.includes(older)
          ? query.map((q) => (q === field ? older : q))
          : query.filter((q) => q !== field);
      parser = new NvidiaSmiParser(deps.host, query);
      changed = true;
      deps.logger.warn(
        `${name}: this driver rejects the field "${field}"; ${older ? `querying the older "${older}" instead` : 'querying without it'}`,
      );
      return true;
    };
    const input = commandLines(
      name,
      cfg.command,
      args,
      deps,
      (line) => {
        if (rejected(line)) return;
        const r = parser.push(line, deps.now());
        if (r.pci) deps.pciMap.set(r.pci.busId, r.pci.gpu);
        if (r.problem) deps.parseProblems(name, [r.problem]);
        if (r.event) deps.emit([cfg.job ? { ...r.event, job: cfg.job } : r.event]);
      },
      {
        onStderrLine: (line) => void rejected(line),
        restartNow: () => {
          const again = changed && query.length > 0;
          changed = false;
          return again;
        },
      },
    );
    return { type: 'nvidia_smi', name, start: input.start, stop: input.stop };
  },
};

/** What nvidia-smi prints (and exits 2 on) for a field its driver does not have (huggingface/candle#733). */
const INVALID_FIELD = /Field "([^"]+)" is not a valid field to query/;
/** Fields renamed by newer drivers → the name older drivers accept (clock "throttle" → "event" reasons, R535). */
const OLDER_NAME: Record<string, string> = {
  'clocks_event_reasons.active': 'clocks_throttle_reasons.active',
  'clocks_event_reasons.supported': 'clocks_throttle_reasons.supported',
};
