/**
 * What a user sets to reach Kafka, from flags and environment. The kafkajs client is built from it
 * in kafka.ts, the one file that loads kafkajs, so a maintained client can replace it behind the
 * Transport interface (and `--help` does not load it).
 */
import { defineOptions, type OptionValues, resolveOptions } from '../cli/args.js';
import { RankwatchError } from '../core/errors.js';

export interface KafkaTransportConfig {
  /** Bootstrap brokers, host:port. */
  brokers: string[];
  /** Client id the broker sees in its logs and quotas (default `rankwatch`). */
  clientId?: string;
  /** Topic of event batches (default `rankwatch.events`). */
  topic?: string;
  /**
   * Topic of batches keyed by host group (`JOB/hostgroup-N`: GPU samples and collectives of a
   * sharded job), read by `detect --stage shard` (default `rankwatch.shards`).
   */
  shardTopic?: string;
  /**
   * Topic of what shard stages send their job stages, keyed by job: collectives reduced per
   * communicator and step, marks, GPU findings (default `rankwatch.shard-records`).
   */
  shardRecordsTopic?: string;
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
  shardTopic: 'rankwatch.shards',
  shardRecordsTopic: 'rankwatch.shard-records',
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

/** The Kafka options every Kafka command shares, each with its RANKWATCH_KAFKA_* twin. */
export const KAFKA_OPTIONS = defineOptions({
  brokers: {
    kind: 'list',
    item: 'host:port',
    env: 'RANKWATCH_KAFKA_BROKERS',
    default: ['127.0.0.1:9092'],
    help: 'bootstrap brokers, comma-separated host:port',
  },
  'client-id': {
    kind: 'string',
    arg: 'ID',
    env: 'RANKWATCH_KAFKA_CLIENT_ID',
    default: KAFKA_DEFAULTS.clientId,
    help: 'client id the brokers see',
  },
  topic: {
    kind: 'string',
    arg: 'NAME',
    env: 'RANKWATCH_KAFKA_TOPIC',
    default: KAFKA_DEFAULTS.topic,
    help: 'events topic',
  },
  'shard-topic': {
    kind: 'string',
    arg: 'NAME',
    env: 'RANKWATCH_KAFKA_SHARD_TOPIC',
    default: KAFKA_DEFAULTS.shardTopic,
    help: 'topic of GPU samples and collectives keyed by host group (the sharded layout)',
  },
  'shard-records-topic': {
    kind: 'string',
    arg: 'NAME',
    env: 'RANKWATCH_KAFKA_SHARD_RECORDS_TOPIC',
    default: KAFKA_DEFAULTS.shardRecordsTopic,
    help: 'topic from shard stages to job stages (reduced collectives, GPU findings)',
  },
  'dead-letter-topic': {
    kind: 'string',
    arg: 'NAME',
    env: 'RANKWATCH_KAFKA_DEAD_LETTER_TOPIC',
    default: KAFKA_DEFAULTS.deadLetterTopic,
    help: 'malformed events with their reason',
  },
  group: {
    kind: 'string',
    arg: 'NAME',
    env: 'RANKWATCH_KAFKA_GROUP',
    default: KAFKA_DEFAULTS.group,
    help: 'consumer group of the detectors',
  },
  partitions: {
    kind: 'number',
    integer: true,
    min: 1,
    env: 'RANKWATCH_KAFKA_PARTITIONS',
    default: KAFKA_DEFAULTS.partitions,
    help: 'partitions when creating the events topic',
  },
  'replication-factor': {
    kind: 'number',
    integer: true,
    min: 1,
    env: 'RANKWATCH_KAFKA_REPLICATION_FACTOR',
    default: KAFKA_DEFAULTS.replicationFactor,
    help: 'replicas of topics rankwatch creates',
  },
  'no-create-topics': { kind: 'boolean', help: 'never create topics (they must exist)' },
  compression: {
    kind: 'enum',
    values: ['gzip', 'none'],
    env: 'RANKWATCH_KAFKA_COMPRESSION',
    default: KAFKA_DEFAULTS.compression,
    help: 'compression of message values',
  },
  tls: { kind: 'boolean', env: 'RANKWATCH_KAFKA_TLS', help: 'connect with TLS (implied by the files below)' },
  'tls-ca': { kind: 'file', env: 'RANKWATCH_KAFKA_TLS_CA', help: 'PEM file of a private CA' },
  'tls-cert': { kind: 'file', env: 'RANKWATCH_KAFKA_TLS_CERT', help: 'client certificate, PEM (mutual TLS)' },
  'tls-key': { kind: 'file', env: 'RANKWATCH_KAFKA_TLS_KEY', help: "the client certificate's key, PEM" },
  'sasl-mechanism': {
    kind: 'enum',
    values: ['plain', 'scram-sha-256', 'scram-sha-512'],
    arg: 'M',
    env: 'RANKWATCH_KAFKA_SASL_MECHANISM',
    help: 'SASL mechanism: plain, scram-sha-256 or scram-sha-512',
  },
  'sasl-username': { kind: 'string', arg: 'U', env: 'RANKWATCH_KAFKA_SASL_USERNAME', help: 'SASL user' },
  'sasl-password': {
    kind: 'string',
    env: 'RANKWATCH_KAFKA_SASL_PASSWORD',
    envOnly: true,
    help: 'SASL password (environment only: flags show in ps)',
  },
  'session-timeout-ms': {
    kind: 'number',
    integer: true,
    min: 1,
    arg: 'MS',
    env: 'RANKWATCH_KAFKA_SESSION_TIMEOUT_MS',
    default: KAFKA_DEFAULTS.sessionTimeoutMs,
    help: 'a silent detector loses its partitions after MS',
  },
});

export type KafkaValues = OptionValues<typeof KAFKA_OPTIONS>;

/** The Kafka config the options say. */
export function kafkaConfig(v: KafkaValues): KafkaTransportConfig {
  const ca = v['tls-ca'];
  const cert = v['tls-cert'];
  const key = v['tls-key'];
  let sasl: KafkaTransportConfig['sasl'];
  const mechanism = v['sasl-mechanism'];
  if (mechanism) {
    const username = v['sasl-username'];
    const password = v['sasl-password'];
    if (!username || password === undefined)
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        'SASL needs --sasl-username (RANKWATCH_KAFKA_SASL_USERNAME) and RANKWATCH_KAFKA_SASL_PASSWORD',
      );
    sasl = { mechanism, username, password };
  }
  return {
    brokers: v.brokers,
    clientId: v['client-id'],
    topic: v.topic,
    shardTopic: v['shard-topic'],
    shardRecordsTopic: v['shard-records-topic'],
    deadLetterTopic: v['dead-letter-topic'],
    group: v.group,
    partitions: v.partitions,
    replicationFactor: v['replication-factor'],
    createTopics: v['no-create-topics'] ? false : undefined,
    compression: v.compression,
    // A PEM file implies TLS.
    tls: ca || cert || key ? { caFile: ca, certFile: cert, keyFile: key } : v.tls || undefined,
    sasl,
    sessionTimeoutMs: v['session-timeout-ms'],
  };
}

/** The same from flags not yet parsed (e.g. a collector's kafka:// bus URL) and the environment. */
export function kafkaConfigFrom(
  flags: Record<string, string | boolean | undefined>,
  env: Record<string, string | undefined>,
): KafkaTransportConfig {
  return kafkaConfig(resolveOptions(KAFKA_OPTIONS, flags, env).values);
}
