/**
 * The collector's configuration: a JSON file, with flags on top. The schema is the
 * documentation: every field has a description and a default; unknown keys are rejected and
 * every problem is reported at once, naming its key. Source entries are checked by their own
 * schemas (collectors/index.ts).
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { RankwatchError } from '../core/errors.js';
import {
  DEFAULT_INGEST_IN_FLIGHT_BYTES,
  DEFAULT_INGEST_LIMITS,
  IngestBudget,
  type IngestLimits,
} from '../stream/ingest-limits.js';

export const CollectorConfig = Type.Object(
  {
    host: Type.String({
      default: '',
      description: 'this node’s name in events (default: the machine’s hostname)',
    }),
    bus: Type.String({
      default: 'http://127.0.0.1:7070',
      description:
        'where events go: http(s)://host:port of `rankwatch up`, kafka://broker[,broker]/topic, or file:PATH (JSON lines, appended: for `rankwatch replay`)',
    }),
    token: Type.Optional(
      Type.String({ description: 'bearer token for HTTP ingest (--token or $RANKWATCH_TOKEN win over it)' }),
    ),
    spool: Type.Optional(
      Type.Object(
        {
          dir: Type.String({ description: 'folder for batches kept while the bus is unreachable' }),
          maxBytes: Type.Integer({
            minimum: 1,
            default: 1 << 30,
            description: 'cap on disk; oldest dropped past it',
          }),
        },
        { additionalProperties: false },
      ),
    ),
    health: Type.Object(
      {
        host: Type.String({ default: '127.0.0.1', description: 'address of the health endpoint' }),
        port: Type.Integer({
          minimum: -1,
          default: -1,
          description: 'port for GET /metrics, GET /healthz and POST /v1/ingest (-1: off, 0: any)',
        }),
        ingest: Type.Union([Type.Literal('loopback'), Type.Literal('any'), Type.Literal('off')], {
          default: 'loopback',
          description: 'who may POST /v1/ingest (training hooks): loopback peers only, anyone, or no one',
        }),
        ingestMaxEvents: Type.Integer({
          minimum: 1,
          default: DEFAULT_INGEST_LIMITS.maxEvents,
          description: 'events one POST /v1/ingest may send before 413, nothing of it taken',
        }),
        ingestMaxMb: Type.Number({
          exclusiveMinimum: 0,
          default: DEFAULT_INGEST_LIMITS.maxInflatedBytes / 2 ** 20,
          description: 'MiB of JSON lines one POST may hold once gunzipped before 413',
        }),
        ingestMemoryMb: Type.Number({
          exclusiveMinimum: 0,
          default: DEFAULT_INGEST_IN_FLIGHT_BYTES / 2 ** 20,
          description:
            'MiB of JSON lines all POSTs being read or handed off may hold at once before 429; at least ingestMaxMb',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    statsEveryMs: Type.Integer({
      minimum: 0,
      default: 60_000,
      description: 'log the counters this often (0: never)',
    }),
    flushMs: Type.Integer({
      minimum: 10,
      default: 1000,
      description: 'longest an event waits before it is sent',
    }),
    maxBatchEvents: Type.Integer({ minimum: 1, default: 5000, description: 'events per batch at most' }),
    hostGroupSize: Type.Integer({
      minimum: 0,
      default: 0,
      description:
        'the sharded layout (docs/operations.md, Capacity): GPU samples and collectives keyed JOB/hostgroup-G, this many hosts per group (every collector of a job sets the same); 0 keys everything by job',
    }),
    maxBufferedEvents: Type.Integer({
      minimum: 1,
      default: 200_000,
      description: 'events held in memory at most (oldest dropped past it)',
    }),
    sources: Type.Array(Type.Unknown(), { default: [], description: 'source configs, each with a `type`' }),
  },
  { additionalProperties: false },
);
export type CollectorConfig = Static<typeof CollectorConfig>;

export function loadCollectorConfig(
  file: string | undefined,
  overrides: Partial<CollectorConfig>,
  extraSources: unknown[],
): CollectorConfig {
  let raw: Record<string, unknown> = {};
  if (file) {
    try {
      raw = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `cannot read collector config ${file}: ${(err as Error).message}`,
      );
    }
  }
  for (const [k, v] of Object.entries(overrides)) if (v !== undefined) raw[k] = v;
  raw.sources = [...((raw.sources as unknown[]) ?? []), ...extraSources];
  const cfg = Value.Default(CollectorConfig, raw) as CollectorConfig;
  const problems = [...Value.Errors(CollectorConfig, cfg)].map(
    (e) => `${e.path.slice(1).replaceAll('/', '.') || '(config)'}: ${e.message}`,
  );
  if (!problems.length && cfg.health.ingestMemoryMb < cfg.health.ingestMaxMb)
    problems.push(
      `health.ingestMemoryMb: ${cfg.health.ingestMemoryMb} is below health.ingestMaxMb ${cfg.health.ingestMaxMb}: a request that large could never be taken`,
    );
  if (problems.length)
    throw new RankwatchError('RANKWATCH_ERR_CONFIG', `bad collector config:\n  ${problems.join('\n  ')}`);
  if (!cfg.host) cfg.host = hostname();
  return cfg;
}

/** The limits of the collector's POST /v1/ingest, and the budget all of them share, as configured. */
export function ingestLimitsOf(health: CollectorConfig['health']): {
  ingestLimits: Partial<IngestLimits>;
  ingestBudget: IngestBudget;
} {
  return {
    ingestLimits: {
      maxEvents: health.ingestMaxEvents,
      maxInflatedBytes: Math.floor(health.ingestMaxMb * 2 ** 20),
    },
    ingestBudget: new IngestBudget(Math.floor(health.ingestMemoryMb * 2 ** 20)),
  };
}
