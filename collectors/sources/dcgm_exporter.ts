/** Scrapes dcgm-exporter's Prometheus endpoint on an interval → gpu and XID fault events. */
import { Type } from '@sinclair/typebox';
import { type DcgmState, dcgmToEvents } from '../parsers/dcgm.js';
import { backoffMs, type SourceFactory, sourceName } from '../source.js';
import { repeat } from './repeat.js';

const schema = Type.Object(
  {
    type: Type.Literal('dcgm_exporter'),
    name: Type.Optional(Type.String({ description: 'distinguishes two sources of one type in counters' })),
    url: Type.String({ default: 'http://127.0.0.1:9400/metrics', description: 'dcgm-exporter metrics URL' }),
    intervalMs: Type.Integer({ minimum: 100, default: 1000, description: 'scrape interval' }),
    timeoutMs: Type.Integer({ minimum: 100, default: 2000, description: 'per-scrape timeout' }),
    job: Type.Optional(Type.String({ description: 'job for every GPU on this node (else from pod labels)' })),
    podJobPattern: Type.Optional(
      Type.String({ description: 'regex whose first group is the job, applied to the pod label' }),
    ),
  },
  { additionalProperties: false },
);

export const dcgmExporter: SourceFactory<typeof schema> = {
  type: 'dcgm_exporter',
  description:
    'GPU clocks, power, temperature, utilisation, clock-event reasons, ECC and XIDs from dcgm-exporter',
  schema,
  create(cfg, deps) {
    const name = sourceName('dcgm_exporter', cfg.name);
    const state: DcgmState = new Map();

    const scrape = async () => {
      try {
        const res = await fetch(cfg.url, { signal: AbortSignal.timeout(cfg.timeoutMs) });
        if (!res.ok) throw new Error(`HTTP ${res.status} from ${cfg.url}`);
        const text = await res.text();
        const out = dcgmToEvents(
          text,
          deps.now(),
          { host: deps.host, job: cfg.job, podJobPattern: cfg.podJobPattern },
          state,
        );
        if (out.problems.length) deps.parseProblems(name, out.problems);
        if (Object.keys(out.ignored).length) deps.ignoredFields?.(name, out.ignored);
        if (out.events.length) deps.emit(out.events);
      } catch (err) {
        // fetch hides the reason (ECONNREFUSED, a timeout) in `cause`.
        const cause = (err as { cause?: { code?: string; message?: string } }).cause;
        const why = cause?.code ?? cause?.message ?? (err as Error).message;
        throw new Error(`cannot scrape ${cfg.url}: ${why}`);
      }
    };
    // Scrapes keep their cadence: the wait is the interval less the scrape's own time.
    const input = repeat(name, deps, scrape, {
      waitMs: (started) => cfg.intervalMs - (Date.now() - started),
      backoffMs: (n) => backoffMs(n, cfg.intervalMs),
      recovered: `${cfg.url} is back`,
    });
    return { type: 'dcgm_exporter', name, start: input.start, stop: input.stop };
  },
};
