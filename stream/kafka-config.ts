/**
 * What a user sets to reach Kafka, from flags and environment. The kafkajs client is built from it
 * in kafka.ts, the one file that loads kafkajs, so a maintained client can replace it behind the
 * Transport interface (and `--help` does not load it).
 */
import { RankwatchError } from '../core/errors.js';

export interface KafkaTransportConfig {
  /** Bootstrap brokers, host:port. */
  brokers: string[];
  /** Client id the broker sees in its logs and quotas (default `rankwatch`). */
  clientId?: string;
  /** Topic of event batches (default `rankwatch.events`). */
  topic?: string;
  /** Topic of malformed events with their reason (default `rankwatch.dead-letters`). */
  deadLetterTopic?: string;
  /** Consumer group of the detectors (default `rankwatch-detect`). */
  group?: string;
  /** Partitions of the events topic when rankwatch creates it; the most detectors that share work (default 12). */
  partitions?: number;
  /** Replication factor of topics rankwatch creates (default 1; 3 in production). */
  replicationFactor?: number;
  /** Create missing topics on start (default true; off where the client may not administer topics). */
  createTopics?: boolean;
  /** Compression of message values: gzip (the only codec kafkajs ships) or none (default gzip). */
  compression?: 'gzip' | 'none';
  /** TLS: true for system CAs, or PEM files. */
  tls?: boolean | { caFile?: string; certFile?: string; keyFile?: string; rejectUnauthorized?: boolean };
  sasl?: { mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512'; username: string; password: string };
  /** Batches the producer holds before publish waits (bounded memory; default 1024). */
  maxQueuedBatches?: number;
  /** Messages per produce request (default 512). */
  maxBatchesPerSend?: number;
  /** A produce that takes longer fails as unavailable, so a spool can take over (default 15000). */
  sendTimeoutMs?: number;
  /** A detector that stops heartbeating for this long loses its partitions (default 30000). */
  sessionTimeoutMs?: number;
  heartbeatIntervalMs?: number;
  /** Largest message value; bigger batches are split (default 900 KiB, under the broker's 1 MiB). */
  maxMessageBytes?: number;
  connectionTimeoutMs?: number;
  /** Consecutive messages of one key merged into one delivery, up to this many events (default 32768). */
  mergeEvents?: number;
  /** Deliveries in flight at once: detectors run on the next while the store writes the last (default 4). */
  pipelineDepth?: number;
}

export const KAFKA_DEFAULTS = {
  clientId: 'rankwatch',
  topic: 'rankwatch.events',
  deadLetterTopic: 'rankwatch.dead-letters',
  group: 'rankwatch-detect',
  partitions: 12,
  replicationFactor: 1,
  createTopics: true,
  compression: 'gzip' as 'gzip' | 'none',
  maxQueuedBatches: 1024,
  maxBatchesPerSend: 512,
  sendTimeoutMs: 15_000,
  sessionTimeoutMs: 30_000,
  heartbeatIntervalMs: 3_000,
  maxMessageBytes: 900 << 10,
  connectionTimeoutMs: 3_000,
  mergeEvents: 32_768,
  pipelineDepth: 4,
};

export type ResolvedKafkaConfig = typeof KAFKA_DEFAULTS &
  Pick<KafkaTransportConfig, 'brokers' | 'tls' | 'sasl'>;

export function resolveKafkaConfig(c: KafkaTransportConfig): ResolvedKafkaConfig {
  const r = { ...KAFKA_DEFAULTS };
  for (const [k, v] of Object.entries(c)) if (v !== undefined) (r as Record<string, unknown>)[k] = v;
  const problems: string[] = [];
  if (!c.brokers?.length) problems.push('brokers: give at least one host:port');
  for (const b of c.brokers ?? [])
    if (!/^[^:\s]+:\d+$/.test(b)) problems.push(`brokers: "${b}" is not host:port`);
  if (!(r.partitions >= 1)) problems.push('partitions: must be at least 1');
  if (!(r.pipelineDepth >= 1)) problems.push('pipelineDepth: must be at least 1');
  if (!(r.replicationFactor >= 1)) problems.push('replicationFactor: must be at least 1');
  if (r.compression !== 'gzip' && r.compression !== 'none') problems.push('compression: gzip or none');
  if (r.topic === r.deadLetterTopic) problems.push('deadLetterTopic: must differ from topic');
  if (problems.length) throw new RankwatchError('RANKWATCH_ERR_CONFIG', `kafka: ${problems.join('; ')}`);
  return r as ResolvedKafkaConfig;
}

export type KafkaLog = (level: 'info' | 'warn' | 'error', message: string) => void;

/**
 * kafkajs logs every failed connection attempt of every broker connection: a 50 s broker outage
 * was ~565 error lines. This passes the first line of each kind (digits ignored) and at most
 * `max` lines per window, then says how many it held back once the next window opens.
 */
export function limitKafkaLog(
  log: KafkaLog,
  o: { windowMs?: number; max?: number } = {},
  now: () => number = Date.now,
): KafkaLog {
  const windowMs = o.windowMs ?? 60_000;
  const max = o.max ?? 5;
  let start = Number.NEGATIVE_INFINITY;
  let shown = 0;
  let held = 0;
  const seen = new Set<string>();
  return (level, message) => {
    const t = now();
    if (t - start >= windowMs) {
      if (held > 0)
        log('warn', `kafkajs: ${held} more line(s) like the above held back in ${windowMs / 1000} s`);
      start = t;
      shown = 0;
      held = 0;
      seen.clear();
    }
    const kind = message.replace(/\d+/g, '#');
    if (seen.has(kind) || shown >= max) {
      held++;
      return;
    }
    seen.add(kind);
    shown++;
    log(level, message);
  };
}

/** Flags every Kafka command shares, for node's parseArgs. */
export const KAFKA_FLAGS = {
  brokers: { type: 'string' },
  'client-id': { type: 'string' },
  topic: { type: 'string' },
  'dead-letter-topic': { type: 'string' },
  group: { type: 'string' },
  partitions: { type: 'string' },
  'replication-factor': { type: 'string' },
  'no-create-topics': { type: 'boolean' },
  compression: { type: 'string' },
  tls: { type: 'boolean' },
  'tls-ca': { type: 'string' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  'sasl-mechanism': { type: 'string' },
  'sasl-username': { type: 'string' },
  'session-timeout-ms': { type: 'string' },
} as const;

export const KAFKA_FLAGS_HELP = `  --brokers LIST            bootstrap brokers, comma-separated host:port   [RANKWATCH_KAFKA_BROKERS] (default 127.0.0.1:9092)
  --client-id ID            client id                                       [RANKWATCH_KAFKA_CLIENT_ID] (default ${KAFKA_DEFAULTS.clientId})
  --topic NAME              events topic                                    [RANKWATCH_KAFKA_TOPIC] (default ${KAFKA_DEFAULTS.topic})
  --dead-letter-topic NAME  malformed events with their reason              [RANKWATCH_KAFKA_DEAD_LETTER_TOPIC] (default ${KAFKA_DEFAULTS.deadLetterTopic})
  --group NAME              consumer group of the detectors                 [RANKWATCH_KAFKA_GROUP] (default ${KAFKA_DEFAULTS.group})
  --partitions N            partitions when creating the events topic       [RANKWATCH_KAFKA_PARTITIONS] (default ${KAFKA_DEFAULTS.partitions})
  --replication-factor N    replicas of topics rankwatch creates            [RANKWATCH_KAFKA_REPLICATION_FACTOR] (default 1)
  --no-create-topics        never create topics (they must exist)
  --compression C           gzip or none                                    [RANKWATCH_KAFKA_COMPRESSION] (default gzip)
  --tls                     connect with TLS                                [RANKWATCH_KAFKA_TLS=1]
  --tls-ca/--tls-cert/--tls-key FILE   PEM files for TLS                    [RANKWATCH_KAFKA_TLS_CA, _CERT, _KEY]
  --sasl-mechanism M        plain, scram-sha-256 or scram-sha-512           [RANKWATCH_KAFKA_SASL_MECHANISM]
  --sasl-username U         SASL user; the password only from the environment [RANKWATCH_KAFKA_SASL_USERNAME, RANKWATCH_KAFKA_SASL_PASSWORD]
  --session-timeout-ms MS   a silent detector loses its partitions after MS [RANKWATCH_KAFKA_SESSION_TIMEOUT_MS] (default 30000)`;

/** Flags first, then RANKWATCH_KAFKA_* environment variables, then defaults. */
export function kafkaConfigFrom(
  flags: Record<string, string | boolean | undefined>,
  env: Record<string, string | undefined>,
): KafkaTransportConfig {
  const s = (flag: string, name: string) => {
    const v = flags[flag];
    return typeof v === 'string' ? v : env[`RANKWATCH_KAFKA_${name}`] || undefined;
  };
  const n = (flag: string, name: string) => {
    const v = s(flag, name);
    if (v === undefined) return undefined;
    const x = Number(v);
    if (!Number.isInteger(x))
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        `--${flag} (RANKWATCH_KAFKA_${name}) needs an integer, got "${v}"`,
      );
    return x;
  };
  const ca = s('tls-ca', 'TLS_CA');
  const cert = s('tls-cert', 'TLS_CERT');
  const key = s('tls-key', 'TLS_KEY');
  const tlsOn = flags.tls === true || env.RANKWATCH_KAFKA_TLS === '1' || !!(ca || cert || key);
  const mechanism = s('sasl-mechanism', 'SASL_MECHANISM');
  let sasl: KafkaTransportConfig['sasl'];
  if (mechanism) {
    if (!['plain', 'scram-sha-256', 'scram-sha-512'].includes(mechanism))
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        `--sasl-mechanism: plain, scram-sha-256 or scram-sha-512, got "${mechanism}"`,
      );
    const username = s('sasl-username', 'SASL_USERNAME');
    const password = env.RANKWATCH_KAFKA_SASL_PASSWORD;
    if (!username || password === undefined)
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        'SASL needs --sasl-username and RANKWATCH_KAFKA_SASL_PASSWORD',
      );
    sasl = { mechanism: mechanism as 'plain', username, password };
  }
  const compression = s('compression', 'COMPRESSION');
  return {
    brokers: (s('brokers', 'BROKERS') ?? '127.0.0.1:9092')
      .split(',')
      .map((b) => b.trim())
      .filter(Boolean),
    clientId: s('client-id', 'CLIENT_ID'),
    topic: s('topic', 'TOPIC'),
    deadLetterTopic: s('dead-letter-topic', 'DEAD_LETTER_TOPIC'),
    group: s('group', 'GROUP'),
    partitions: n('partitions', 'PARTITIONS'),
    replicationFactor: n('replication-factor', 'REPLICATION_FACTOR'),
    createTopics: flags['no-create-topics'] === true ? false : undefined,
    compression: compression as KafkaTransportConfig['compression'],
    tls: tlsOn ? (ca || cert || key ? { caFile: ca, certFile: cert, keyFile: key } : true) : undefined,
    sasl,
    sessionTimeoutMs: n('session-timeout-ms', 'SESSION_TIMEOUT_MS'),
  };
}
