/**
 * The bus at scale: Apache Kafka through kafkajs.
 *
 * One events topic, keyed by job (telemetry without a job by `host:NAME`), so every kind of event
 * of a job reaches one consumer in the order it was published; the detectors correlate kinds
 * (gpu samples with steps), which per-kind topics would lose. Each message is a batch of events
 * (JSON lines, gzip; see codec.ts). The producer is idempotent, holds a bounded queue and merges
 * what callers publish into few produce requests.
 *
 * The consumer is a group member: eachBatch, offsets committed only after the handler (the store
 * write) resolved, a failed handler retried in place while heartbeats go on. When a partition
 * comes to this process, the batches another owner already committed are handed to `onReplay`
 * (detector state rebuilt, output dropped) before live delivery resumes at the committed offset.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import type {
  Admin,
  Consumer,
  EachBatchPayload,
  KafkaConfig,
  KafkaMessage,
  LogEntry,
  Message,
  Producer,
  SASLOptions,
} from 'kafkajs';
import { CompressionTypes, Kafka, logLevel, Partitioners } from 'kafkajs';
import { RankwatchError, retry } from '../core/errors.js';
import type { DeadLetter } from '../store/rows.js';
import { coPartitioned } from './co-partition.js';
import { decodeBatch, encodeBatch } from './codec.js';
import { isShardKey, parseShardKey } from './host-groups.js';
import {
  type KafkaLog,
  type KafkaTransportConfig,
  limitKafkaLog,
  type ResolvedKafkaConfig,
  resolveKafkaConfig,
} from './kafka-config.js';
import { quietRequestQueues } from './kafkajs-idle.js';
import type { Batch, Delivery, DeliveryHandler, Transport, TransportCounters } from './transport.js';

/** A kafkajs client whose log lines go to the injected logger (warnings and errors, rate-limited). */
export function kafkaClient(c: ResolvedKafkaConfig, rawLog: KafkaLog): Kafka {
  quietRequestQueues(); // kafkajs's idle timer loop (stream/kafkajs-idle.ts)
  const log = limitKafkaLog(rawLog);
  const cfg: KafkaConfig = {
    clientId: c.clientId,
    brokers: c.brokers,
    connectionTimeout: c.connectionTimeoutMs,
    // Connecting fails fast; consumers and admin set their own, longer, retries.
    retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1_000 },
    logLevel: logLevel.WARN,
    logCreator:
      () =>
      ({ level, log: entry }: LogEntry) => {
        if (level > logLevel.WARN) return;
        log(level <= logLevel.ERROR ? 'error' : 'warn', `kafkajs: ${entry.message}`);
      },
  };
  if (c.tls) {
    if (c.tls === true) cfg.ssl = true;
    else {
      const t: ConnectionOptions = { rejectUnauthorized: c.tls.rejectUnauthorized ?? true };
      if (c.tls.caFile) t.ca = [readFileSync(c.tls.caFile, 'utf8')];
      if (c.tls.certFile) t.cert = readFileSync(c.tls.certFile, 'utf8');
      if (c.tls.keyFile) t.key = readFileSync(c.tls.keyFile, 'utf8');
      cfg.ssl = t;
    }
  }
  if (c.sasl) cfg.sasl = c.sasl as SASLOptions;
  return new Kafka(cfg);
}

/** Messages per partition whose fingerprints are kept to recognise a producer's resend. */
const DUPLICATE_WINDOW = 50_000;

export type { KafkaTransportConfig } from './kafka-config.js';

export interface KafkaTransportDeps {
  log?: KafkaLog;
  /** Rebuilds state from a batch another owner already processed and committed; its output is dropped. */
  onReplay?: (d: Delivery) => Promise<void> | void;
  /**
   * Replays only messages younger than this (by message timestamp); older committed ones are
   * passed over. Bounds rebuild time under long retention, at a price: an incident open since
   * before the window is opened again under a new id. Unset: replay everything retained.
   */
  replayMaxAgeMs?: number;
  /**
   * kafkajs restarted (or gave up on) its consumer after an error, e.g. the broker went away; it
   * restarts every few hundred ms while the broker is down. Without it, each crash is logged.
   */
  onCrash?: (err: Error, restart: boolean) => void;
  /** The consumer joined the group (again): the bus answers. */
  onJoin?: () => void;
  /**
   * Partitions this process owned and no longer does (a rebalance gave them to another member),
   * told before the new assignment is consumed: state kept for them would go stale. When one comes
   * back it is read from the start again (its replay rebuilds the state).
   */
  onRevoked?: (partitions: number[]) => void;
  /**
   * Records each delivery's offset range before its handler runs and, on assignment, gives back
   * the ranges recorded past the committed offset: a new owner then batches that stretch exactly
   * as the last owner did, so the store's insert tokens (topic/partition/first-last) match and
   * nothing counts twice (store/delivery-ranges.ts).
   */
  boundaries?: {
    record(topic: string, partition: number, first: number, last: number): Promise<void>;
    load(topic: string, partition: number, from: number): Promise<Map<number, number>>;
  };
  /**
   * `boundaries` failed to read or record (its store is down): the batch is held and retried, the
   * member kept in its group by heartbeats. Told on every failed attempt; not a consumer crash.
   */
  onBoundariesRetry?: (err: Error) => void;
  /** `boundaries` answered again after onBoundariesRetry. */
  onBoundariesRecovered?: () => void;
  /**
   * The process this consumer belongs to: its group gives partition p to the same process as
   * every other group whose consumers name theirs (a job stage's two topics, stream/co-partition.ts).
   */
  coPartition?: string;
  /**
   * Where the handler's output can lag its delivery (a job stage holds events until its shards'
   * records come): per partition, the offset below which every message's output is stored and
   * sunk, undefined while none is known. Commits go no further, and move on (checked every
   * second) once held messages come out, so a new owner handles what was held live, not as a
   * replay whose output is dropped. Unset: a delivery's output is out once its handler resolved.
   */
  commitLimit?: (partition: number) => number | undefined;
}

export interface KafkaCounters extends TransportCounters {
  replayed_batches: number;
  /** Committed batches older than replayMaxAgeMs, passed over on assignment. */
  replay_skipped_batches: number;
  skipped_batches: number;
  /** Messages whose bytes equal a recent message of the partition: a producer's resend, not stored again. */
  duplicate_messages: number;
  commits: number;
  dead_letters_sent: number;
  /** Dead letters the broker refused for good (kept in the store only). */
  dead_letters_rejected: number;
}

interface Pending {
  topic: string;
  message: Message;
  bytes: number;
  /** The publish call it came with, and that call's messages and bytes in all. */
  call: number;
  callCount: number;
  callBytes: number;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** A dead letter as the dead-letter topic carries it: where it was read wins over the `origin` given to deadLetter(). */
export type DeadLetterRecord = Omit<DeadLetter, 'line'>;

/**
 * Whether two keys' messages may go in one delivery: the same key, or host groups of one job (a
 * shard reads many groups of a job in one partition; one delivery per group would cost a store
 * write and a recorded range per collector message).
 */
function sameStream(a: string, b: string): boolean {
  if (a === b) return true;
  const x = parseShardKey(a);
  return x !== undefined && x.job === parseShardKey(b)?.job;
}

/** Consecutive deliveries of one key (or of one job's host groups) and partition as one. */
function mergeDeliveries(ds: Delivery[]): Delivery {
  const undecodable = ds.flatMap((d) => d.undecodable ?? []);
  return {
    key: ds[0].key,
    partition: ds[0].partition,
    offset: ds[ds.length - 1].offset,
    events: ds.flatMap((d) => d.events),
    ...(ds.every((d) => d.lines) ? { lines: ds.flatMap((d) => d.lines!) } : {}),
    ...(undecodable.length ? { undecodable } : {}),
    topic: ds[0].topic,
    messages: ds.flatMap((d) => d.messages ?? []),
  };
}

/**
 * The most of a raw line a dead-letter record carries: far under the broker's 1 MiB message limit
 * (a record holds the line JSON-escaped, up to 6 bytes per character, plus the reason), so a
 * record is never refused for its size. A longer line is cut, with its size and SHA-256 kept.
 */
export const DEAD_LETTER_RAW_CHARS = 64 * 1024;

/** A dead letter as the record sent to the dead-letter topic (value JSON). */
export function deadLetterValue(
  r: DeadLetterRecord,
  topic: string,
  origin?: { partition: number; offset: number },
): string {
  const long = r.raw.length > DEAD_LETTER_RAW_CHARS;
  return JSON.stringify({
    ts: r.ts,
    source: r.source,
    reason: r.reason.slice(0, 4096),
    raw: long ? r.raw.slice(0, DEAD_LETTER_RAW_CHARS) : r.raw,
    ...(long
      ? {
          raw_truncated: true,
          raw_bytes: Buffer.byteLength(r.raw),
          raw_sha256: createHash('sha256').update(r.raw).digest('hex'),
        }
      : {}),
    topic: r.topic ?? topic,
    ...(r.partition !== undefined && r.offset !== undefined
      ? { partition: r.partition, offset: r.offset }
      : origin),
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A delivery's place in its partition: handed to the handler `after` the one before it, then `handed`. */
interface Turn {
  after: Promise<void>;
  handed: () => void;
}

/**
 * Resolves once every partition of the topics has a leader that serves it, trying again for up to
 * about 15 s. A topic created a moment ago (by this process, or by one started beside it: a job
 * stage and its shards create the same topics at once) is not served yet: a metadata, produce or
 * fetch request fails with kafkajs's UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this
 * topic-partition", or LEADER_NOT_AVAILABLE. A leader named in the metadata may not serve its
 * partition yet either (NOT_LEADER_FOR_PARTITION: seen on a loaded machine, where a publish right
 * after failed), so each topic's offsets are asked of the leaders too, which answer only once they
 * do. Any other error (the broker away) is the caller's to retry.
 */
function untilLed(admin: Admin, names: string[]): Promise<void> {
  return retry(
    async () => {
      const waiting = await admin.fetchTopicMetadata({ topics: names }).then(
        ({ topics }) =>
          names.flatMap((name) => {
            const parts = topics.find((t) => t.name === name)?.partitions ?? [];
            if (parts.length === 0) return [name];
            return parts.filter((p) => !(p.leader >= 0)).map((p) => `${name}[${p.partitionId}]`);
          }),
        (err) => {
          if (!notServedYet(err)) throw err;
          return names;
        },
      );
      if (waiting.length)
        throw new RankwatchError(
          'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE',
          `no partition leader yet: ${waiting.join(', ')}`,
        );
      for (const name of names)
        await admin.fetchTopicOffsets(name).catch((err) => {
          if (!notServedYet(err)) throw err;
          throw new RankwatchError(
            'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE',
            `partitions of ${name} not served by their leaders yet: ${(err as Error).message}`,
          );
        });
    },
    { attempts: 20, baseDelayMs: 100, maxDelayMs: 1_000, jitter: true },
  );
}

/** kafkajs's answer for a topic the broker does not serve yet (its own retrier wraps it as `cause`). */
function notServedYet(err: unknown): boolean {
  for (let e = err as { type?: string; cause?: unknown } | undefined; e; e = e.cause as typeof e)
    if (
      e.type === 'UNKNOWN_TOPIC_OR_PARTITION' ||
      e.type === 'LEADER_NOT_AVAILABLE' ||
      e.type === 'NOT_LEADER_FOR_PARTITION'
    )
      return true;
  return false;
}

/** Broker refusals that trying again cannot fix; everything else counts as "the bus is away". */
function transportError(err: unknown, what: string): RankwatchError {
  if (err instanceof RankwatchError) return err;
  const e = err as { name?: string; retriable?: boolean; message?: string };
  const refused = e.name === 'KafkaJSProtocolError' && e.retriable === false;
  return new RankwatchError(
    refused ? 'RANKWATCH_ERR_TRANSPORT_REJECTED' : 'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE',
    `${what}: ${e.message ?? String(err)}`,
    { cause: err },
  );
}

export class KafkaTransport implements Transport {
  readonly type = 'kafka';
  readonly config: ResolvedKafkaConfig;
  private readonly kafka;
  private readonly log: KafkaLog;
  private producer: Producer | undefined;
  private producerReady: Promise<Producer> | undefined;
  private admin: Promise<Admin> | undefined;
  private consumer: Consumer | undefined;
  private handler: DeliveryHandler | undefined;
  private topicsReady: Promise<void> | undefined;
  /** Whether this producer has sent host-group keys (so the shard topic is created too). */
  private sendsShards = false;
  private queue: Pending[] = [];
  private queuedMessages = 0;
  private calls = 0;
  private sending: Promise<void> | undefined;
  private spaceWaiters: (() => void)[] = [];
  private stopped = false;
  /** Partitions of the last assignment (GROUP_JOIN). */
  private assigned = new Set<number>();
  /** Next offset per partition this process has seen (handled or replayed). */
  private readonly next = new Map<number, number>();
  /**
   * Per partition, fingerprints of the last DUPLICATE_WINDOW messages (first offset seen). A
   * producer is at least once: after a lost acknowledgement the collector sends a batch again, and
   * the broker keeps both copies at two offsets. Raw tables would keep one copy, but rollups count
   * every inserted block, so a message whose bytes repeat a recent one is passed over, counted.
   */
  private readonly recent = new Map<number, Map<string, number>>();
  /** Committed offsets of the group when each partition was assigned to this process. */
  private committedAtJoin = new Map<number, Promise<number>>();
  /** Per partition: delivery ranges (first → last) the last owner recorded past the committed offset. */
  private recorded = new Map<number, Promise<Map<number, number>>>();
  /** The last read or record of delivery ranges failed (told once it answers again). */
  private boundariesFailing = false;
  /** Per partition: delivery ranges (first → last) this process recorded (see `recorded`). */
  private readonly mine = new Map<number, Map<number, number>>();
  /** Per partition: the batch being handled (awaited by the next, whichever kafkajs run it is in). */
  private readonly partitionBusy = new Map<number, Promise<void>>();
  /** With replayMaxAgeMs: per partition, the first offset young enough to replay. */
  private replayFrom = new Map<number, Promise<number>>();
  /** Per partition: the offset past the deliveries handled (what may be committed), and the last committed. */
  private readonly handledTo = new Map<number, number>();
  private readonly committedTo = new Map<number, number>();
  /** Commits one at a time, so a later one never lands before an earlier one. */
  private committing: Promise<void> = Promise.resolve();
  /** With commitLimit: commits what has come out since the last batch, a round at a time. */
  private commitTimer: NodeJS.Timeout | undefined;
  private releasing: Promise<unknown> | undefined;
  private readonly c: KafkaCounters = {
    published_batches: 0,
    published_events: 0,
    delivered_batches: 0,
    redelivered_batches: 0,
    handler_errors: 0,
    replayed_batches: 0,
    replay_skipped_batches: 0,
    skipped_batches: 0,
    duplicate_messages: 0,
    commits: 0,
    dead_letters_sent: 0,
    dead_letters_rejected: 0,
  };

  constructor(
    config: KafkaTransportConfig,
    private readonly deps: KafkaTransportDeps = {},
  ) {
    this.config = resolveKafkaConfig(config);
    this.log = deps.log ?? (() => {});
    this.kafka = kafkaClient(this.config, this.log);
  }

  // ---- producer side -------------------------------------------------------------------

  async publish(batches: Batch[]): Promise<void> {
    if (this.stopped)
      throw new RankwatchError('RANKWATCH_ERR_STOPPED', 'publish on a stopped kafka transport');
    const messages: Message[] = [];
    let events = 0;
    for (const b of batches) {
      events += b.events.length;
      this.encode(b.key, b.events, messages);
    }
    if (messages.length === 0) return;
    // A lone event too large for one message is refused before anything is sent: a refusal by the
    // broker would come after the requests before it were stored, and the caller, isolating the
    // refused event (stream/isolate.ts), would publish those again under new offsets, which the
    // per-minute rollups then count twice.
    const over = messages.find((m) => (m.value as Buffer).length > this.config.maxMessageBytes);
    if (over)
      throw new RankwatchError(
        'RANKWATCH_ERR_TRANSPORT_REJECTED',
        `publish to ${this.config.topic}: one event encodes to ${(over.value as Buffer).length} bytes, over the ${this.config.maxMessageBytes}-byte message limit (the broker refuses more than its message.max.bytes)`,
      );
    // Host-group keys (the sharded layout, stream/host-groups.ts) go to the shards' topic.
    const topic = this.config.topic;
    const shards = this.config.shardTopic;
    // The shard topic exists only where host-group keys are sent: single-process users get none.
    if (!this.sendsShards && messages.some((m) => isShardKey(String(m.key)))) {
      this.sendsShards = true;
      this.topicsReady = undefined;
    }
    await this.enqueue((m) => (isShardKey(String(m.key)) ? shards : topic), messages);
    this.c.published_batches += batches.length;
    this.c.published_events += events;
  }

  /**
   * Sends malformed events to the dead-letter topic, each with its reason (header and value) and
   * the topic/partition/offset it was read at. A refusal by the broker (TRANSPORT_REJECTED: topic
   * missing, not authorized...) is logged and counted, not thrown: trying again cannot fix it, and
   * the store's dead_letters table already holds these rows. An outage still throws (retried).
   */
  async deadLetter(rows: DeadLetterRecord[], origin?: { partition: number; offset: number }): Promise<void> {
    if (rows.length === 0) return;
    const messages: Message[] = rows.map((r) => ({
      key: r.source,
      value: deadLetterValue(r, this.config.topic, origin),
      headers: { reason: r.reason.slice(0, 1000) },
    }));
    try {
      await this.enqueue(this.config.deadLetterTopic, messages);
    } catch (err) {
      if (!(err instanceof RankwatchError && err.code === 'RANKWATCH_ERR_TRANSPORT_REJECTED')) throw err;
      this.c.dead_letters_rejected += rows.length;
      this.log(
        'error',
        `the broker refused ${rows.length} dead letter(s) for ${this.config.deadLetterTopic}; they stay in the store's dead_letters table: ${err.message}`,
      );
      return;
    }
    this.c.dead_letters_sent += rows.length;
  }

  /** One batch as one message, split in halves while it is over the size limit. */
  private encode(key: string, events: unknown[], out: Message[]): void {
    const value = encodeBatch(events, this.config.compression === 'gzip');
    if (value.length > this.config.maxMessageBytes && events.length > 1) {
      const half = events.length >> 1;
      this.encode(key, events.slice(0, half), out);
      this.encode(key, events.slice(half), out);
      return;
    }
    out.push({ key, value });
  }

  private async enqueue(topic: string | ((m: Message) => string), messages: Message[]): Promise<void> {
    while (this.queuedMessages >= this.config.maxQueuedBatches && !this.stopped)
      await new Promise<void>((r) => this.spaceWaiters.push(r));
    // One entry per message, so a call too large for one request can be cut at any message.
    const size = (m: Message) =>
      typeof m.value === 'string' ? Buffer.byteLength(m.value) : (m.value?.length ?? 0);
    const call = ++this.calls;
    const callBytes = messages.reduce((n, m) => n + size(m), 0);
    const done = messages.map(
      (m) =>
        new Promise<void>((resolve, reject) => {
          this.queue.push({
            topic: typeof topic === 'string' ? topic : topic(m),
            message: m,
            bytes: size(m),
            call,
            callCount: messages.length,
            callBytes,
            resolve,
            reject,
          });
        }),
    );
    this.queuedMessages += messages.length;
    this.sending ??= this.sendLoop().finally(() => {
      this.sending = undefined;
    });
    await Promise.all(done);
  }

  /**
   * Merges queued messages into produce requests. The broker's size limit applies to a request's
   * record batch per partition, so a request stays under maxMessageBytes in all. A failure fails
   * everything queued, so nothing queued behind a lost message overtakes it.
   */
  private async sendLoop(): Promise<void> {
    while (this.queue.length > 0) {
      const take: Pending[] = [];
      let bytes = 0;
      // A call joins a request only whole when it fits: a call cut over two requests could fail
      // after its first part was stored, and its caller (a spool) would publish that part again
      // as new messages, which the rollups count twice.
      while (this.queue.length > 0) {
        const q = this.queue[0];
        if (take.length > 0) {
          const same = q.call === take[take.length - 1].call;
          if (
            take.length + (same ? 1 : q.callCount) > this.config.maxBatchesPerSend ||
            bytes + (same ? q.bytes : q.callBytes) > this.config.maxMessageBytes
          )
            break;
        }
        take.push(this.queue.shift()!);
        bytes += q.bytes;
      }
      const n = take.length;
      const byTopic = new Map<string, Message[]>();
      for (const p of take) {
        const list = byTopic.get(p.topic);
        if (list) list.push(p.message);
        else byTopic.set(p.topic, [p.message]);
      }
      try {
        await this.ensureTopics();
        const producer = await this.connectProducer();
        let timer: NodeJS.Timeout | undefined;
        const timeout = new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`no acknowledgement within ${this.config.sendTimeoutMs} ms`)),
            this.config.sendTimeoutMs,
          );
        });
        try {
          await Promise.race([
            producer.sendBatch({
              acks: -1,
              timeout: this.config.sendTimeoutMs,
              compression: CompressionTypes.None, // values are gzip-compressed batches already
              topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })),
            }),
            timeout,
          ]);
        } finally {
          clearTimeout(timer);
        }
        for (const p of take) p.resolve();
      } catch (err) {
        const e = transportError(err, `publish to ${this.config.brokers.join(',')}`);
        this.resetProducer();
        const failed = [...take, ...this.queue.splice(0)];
        for (const p of failed) p.reject(e);
        this.queuedMessages = 0;
        this.wakeSpace();
        return;
      }
      this.queuedMessages -= n;
      this.wakeSpace();
    }
  }

  private wakeSpace(): void {
    const w = this.spaceWaiters;
    this.spaceWaiters = [];
    for (const fn of w) fn();
  }

  private connectProducer(): Promise<Producer> {
    this.producerReady ??= (async () => {
      const p = this.kafka.producer({
        idempotent: true,
        maxInFlightRequests: 1,
        allowAutoTopicCreation: false,
        createPartitioner: Partitioners.DefaultPartitioner,
        // Fail fast when the broker is away: the caller (a spool) owns the long wait.
        retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1_000 },
      });
      try {
        await p.connect();
      } catch (err) {
        this.producerReady = undefined;
        await p.disconnect().catch(() => {});
        throw err;
      }
      this.producer = p;
      return p;
    })();
    return this.producerReady;
  }

  /** A producer that failed starts over with a new id: kafkajs' idempotence state does not survive errors well. */
  private resetProducer(): void {
    const old = this.producer;
    this.producer = undefined;
    this.producerReady = undefined;
    void old?.disconnect().catch(() => {});
  }

  private adminClient(): Promise<Admin> {
    this.admin ??= (async () => {
      const a = this.kafka.admin({ retry: { retries: 5, initialRetryTime: 200, maxRetryTime: 2_000 } });
      try {
        await a.connect();
      } catch (err) {
        this.admin = undefined;
        throw err;
      }
      return a;
    })();
    return this.admin;
  }

  /**
   * Creates the events and dead-letter topics once, with partitions and replication from config,
   * and resolves once every partition of them has a leader, whoever created them.
   */
  ensureTopics(): Promise<void> {
    if (!this.config.createTopics) return Promise.resolve();
    // A broker under load may answer a metadata request for a topic it just created with "does not
    // host this topic-partition": a few quick tries before the caller's own (longer) retry.
    this.topicsReady ??= retry(() => this.createMissingTopics(), {
      attempts: 4,
      baseDelayMs: 250,
      jitter: true,
      retryIf: (err) => transportError(err, '').code === 'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE',
    }).catch((err) => {
      this.topicsReady = undefined;
      throw transportError(err, 'creating topics');
    });
    return this.topicsReady;
  }

  private async createMissingTopics(): Promise<void> {
    const admin = await this.adminClient();
    const existing = new Set(await admin.listTopics());
    const wanted = [
      { topic: this.config.topic, numPartitions: this.config.partitions },
      ...(this.sendsShards ? [{ topic: this.config.shardTopic, numPartitions: this.config.partitions }] : []),
      { topic: this.config.deadLetterTopic, numPartitions: 1 },
    ];
    const topics = wanted
      .filter((t) => !existing.has(t.topic))
      .map((t) => ({ ...t, replicationFactor: this.config.replicationFactor }));
    // waitForLeaders waits only for topics this call created: not when another process's creation
    // came first (listTopics names them, or createTopics answers false for TOPIC_ALREADY_EXISTS).
    if (topics.length) await admin.createTopics({ topics, waitForLeaders: true });
    await untilLed(
      admin,
      wanted.map((t) => t.topic),
    );
  }

  /** How many partitions the topic has (creating it first when topics are created). */
  async partitionCount(): Promise<number> {
    await this.ensureTopics();
    const admin = await this.adminClient();
    const { topics } = await admin.fetchTopicMetadata({ topics: [this.config.topic] });
    return topics[0]?.partitions.length ?? 0;
  }

  // ---- consumer side -------------------------------------------------------------------

  async consume(handler: DeliveryHandler): Promise<void> {
    if (this.handler)
      throw new RankwatchError('RANKWATCH_ERR_USAGE', 'kafka transport has a consumer already');
    if (this.stopped)
      throw new RankwatchError('RANKWATCH_ERR_STOPPED', 'consume on a stopped kafka transport');
    this.handler = handler;
    try {
      await this.ensureTopics();
      const consumer = this.kafka.consumer({
        groupId: this.config.group,
        sessionTimeout: this.config.sessionTimeoutMs,
        heartbeatInterval: this.config.heartbeatIntervalMs,
        rebalanceTimeout: Math.max(60_000, this.config.sessionTimeoutMs),
        allowAutoTopicCreation: false,
        maxBytesPerPartition: 4 << 20,
        maxBytes: 32 << 20,
        maxWaitTimeInMs: 250,
        ...(this.deps.coPartition ? { partitionAssigners: [coPartitioned(this.deps.coPartition)] } : {}),
        // Ride out a broker restart instead of giving up on the group.
        retry: { retries: 20, initialRetryTime: 300, maxRetryTime: 5_000 },
      });
      this.consumer = consumer;
      consumer.on(consumer.events.GROUP_JOIN, (e) => {
        const now = e.payload.memberAssignment[this.config.topic] ?? [];
        this.onRevoked(now);
        this.onAssigned(now);
        this.deps.onJoin?.();
      });
      consumer.on(consumer.events.CRASH, (e) => {
        if (this.deps.onCrash) this.deps.onCrash(e.payload.error, e.payload.restart);
        else
          this.log(
            'error',
            `consumer crashed (${e.payload.restart ? 'restarting' : 'not restarting'}): ${e.payload.error.message}`,
          );
      });
      await consumer.connect();
      await consumer.subscribe({ topic: this.config.topic, fromBeginning: true });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: 1, // one detector runner: batches go through it one at a time
        eachBatch: (p) => this.eachBatch(p),
      });
      if (this.deps.commitLimit)
        this.commitTimer ??= setInterval(() => void this.commitReleased(), 1_000).unref();
    } catch (err) {
      // Not consuming: the caller may call consume() again (e.g. once the broker is back).
      this.handler = undefined;
      const c = this.consumer;
      this.consumer = undefined;
      await c?.disconnect().catch(() => {});
      throw transportError(err, `joining group ${this.config.group}`);
    }
  }

  /** Stops fetching (store backpressure); the batch in hand still finishes. */
  pause(): void {
    this.consumer?.pause([{ topic: this.config.topic }]);
  }

  resume(): void {
    this.consumer?.resume([{ topic: this.config.topic }]);
  }

  /** Forgets what this process knew of the partitions it owned and no longer does. */
  private onRevoked(now: number[]): void {
    const lost = [...this.assigned].filter((p) => !now.includes(p));
    this.assigned = new Set(now);
    if (lost.length === 0) return;
    for (const p of lost) {
      this.next.delete(p);
      this.recent.delete(p);
      this.mine.delete(p);
      this.handledTo.delete(p);
      this.committedTo.delete(p);
    }
    this.deps.onRevoked?.(lost);
  }

  /** Notes what the group had committed, and starts each partition where this process's state ends. */
  private onAssigned(partitions: number[]): void {
    const committed = new Map<number, Promise<number>>();
    const offsets = this.adminClient()
      .then((a) => a.fetchOffsets({ groupId: this.config.group, topics: [this.config.topic] }))
      .then((res) => new Map((res[0]?.partitions ?? []).map((p) => [p.partition, Number(p.offset)])));
    const age = this.deps.onReplay ? this.deps.replayMaxAgeMs : undefined;
    const young =
      age === undefined
        ? undefined
        : this.adminClient()
            .then((a) => a.fetchTopicOffsetsByTimestamp(this.config.topic, Date.now() - age))
            .then((res) => new Map(res.map((o) => [o.partition, Number(o.offset)])));
    const replayFrom = new Map<number, Promise<number>>();
    for (const p of partitions) {
      // No message that young: -1 (or nothing), so every committed batch is passed over.
      if (young)
        replayFrom.set(
          p,
          young.then((m) => ((m.get(p) ?? -1) < 0 ? Number.POSITIVE_INFINITY : m.get(p)!)),
        );
      // Unknown committed offsets must not be guessed (0 would redo everything as live): a
      // failure here fails the batch, and kafkajs rejoins and asks again.
      const at = offsets.then((m) => Math.max(0, m.get(p) ?? 0));
      at.catch((err) => this.log('warn', `reading committed offsets: ${(err as Error).message}`));
      committed.set(p, at);
      // With a replay hook, read from where this process's detector state ends (0: everything
      // the broker still holds) so the state is rebuilt before the first live batch.
      if (this.deps.onReplay)
        this.consumer?.seek({
          topic: this.config.topic,
          partition: p,
          offset: String(this.next.get(p) ?? 0),
        });
    }
    this.committedAtJoin = committed;
    this.replayFrom = replayFrom;
    const b = this.deps.boundaries;
    this.recorded = new Map();
    for (const p of b ? partitions : []) {
      const loaded = committed.get(p)!.then((c) => b!.load(this.config.topic, p, c));
      // A failure is told, and the ranges read again, by the batch that needs them (rangesOnRecord).
      loaded.catch(() => {});
      this.recorded.set(p, loaded);
    }
  }

  /**
   * One fetched batch of a partition: skip what this process already stored, replay what another
   * owner committed, deliver the rest. Consecutive live messages of one key are merged into one
   * delivery (fewer, larger store inserts: the store is the bottleneck), and up to pipelineDepth
   * deliveries are in flight, so the detectors work on the next while the store writes the last.
   * Offsets advance, in order, only past deliveries whose handler resolved.
   */
  private async eachBatch(payload: EachBatchPayload): Promise<void> {
    // One batch per partition at a time in this process, also across a kafkajs restart (a new
    // run must see what the old one handled in `next` before it picks its first message).
    const p = payload.batch.partition;
    const before = this.partitionBusy.get(p);
    const run = (before ?? Promise.resolve()).then(() => this.handleBatch(payload));
    const tail = run.catch(() => {});
    this.partitionBusy.set(p, tail);
    void tail.then(() => {
      if (this.partitionBusy.get(p) === tail) this.partitionBusy.delete(p);
    });
    return run;
  }

  private async handleBatch({
    batch,
    resolveOffset,
    heartbeat,
    isRunning,
    isStale,
  }: EachBatchPayload): Promise<void> {
    const p = batch.partition;
    const committed = (await this.committedAtJoin.get(p)) ?? 0;
    const replayFrom = (await this.replayFrom.get(p)) ?? 0;
    const onRecord = await this.rangesOnRecord(p, committed, heartbeat, () => isRunning() && !isStale());
    if (!onRecord) return; // stopped or rebalanced while the store was down: nothing was handled
    const recorded = new Map(onRecord);
    // Ranges this process put on record itself win: the join may have read the store before them.
    const mine = this.mine.get(p) ?? new Map<number, number>();
    this.mine.set(p, mine);
    for (const [first, last] of mine) {
      if (last < committed) mine.delete(first);
      else recorded.set(first, Math.max(last, recorded.get(first) ?? last));
    }
    /** Inside a range the last owner recorded: its last offset; the delivery must end exactly there. */
    let pinnedTo: number | undefined;
    let commitTo = -1;
    let ok = true;
    const inflight: { done: Promise<boolean>; last: string }[] = [];
    let merge: Delivery[] = [];
    let mergeEvents = 0;
    /** The last delivery in flight has been handed to the handler: the next one goes after it. */
    let handedOver: Promise<void> = Promise.resolve();
    const advance = (offset: string) => {
      const off = Number(offset);
      if (off >= committed) commitTo = off + 1;
      // Not for a partition a rebalance took away meanwhile: its state here is forgotten.
      if (off + 1 > (this.next.get(p) ?? 0) && this.assigned.has(p)) this.next.set(p, off + 1);
      resolveOffset(offset);
    };
    const settleOldest = async () => {
      const f = inflight.shift()!;
      if (!(await f.done)) ok = false;
      else if (ok) advance(f.last);
    };
    const flush = async () => {
      if (merge.length === 0) return;
      const d = merge.length === 1 ? merge[0] : mergeDeliveries(merge);
      merge = [];
      mergeEvents = 0;
      const after = handedOver;
      let handed = () => {};
      handedOver = new Promise<void>((r) => {
        handed = r;
      });
      inflight.push({
        done: this.deliver(d, heartbeat, isRunning, { after, handed }),
        last: String(d.offset),
      });
      while (inflight.length >= this.config.pipelineDepth && ok) await settleOldest();
    };
    try {
      for (const m of batch.messages) {
        if (!isRunning() || isStale() || !ok) break;
        const off = Number(m.offset);
        if (off < (this.next.get(p) ?? 0) && inflight.length === 0 && merge.length === 0) {
          // Handled and stored by this process before; only its commit may be missing.
          this.c.skipped_batches++;
          advance(m.offset);
        } else if (off < committed && off < replayFrom) {
          // Committed and older than the replay window: neither replayed nor handled again.
          this.c.replay_skipped_batches++;
          advance(m.offset);
        } else if (off < committed) {
          await flush();
          while (inflight.length && ok) await settleOldest();
          if (this.isDuplicate(p, m)) this.c.duplicate_messages++;
          else if (this.deps.onReplay) await this.deps.onReplay(this.delivery(m, p));
          this.c.replayed_batches++;
          advance(m.offset);
        } else {
          const d = this.delivery(m, p);
          if (this.isDuplicate(p, m)) {
            // Kept in line as an empty delivery, so offsets still advance in order.
            this.c.duplicate_messages++;
            d.events = [];
            d.lines = [];
            d.undecodable = undefined;
            d.messages = [{ offset: off, events: 0, undecodable: 0 }];
          }
          const pin = pinnedTo === undefined ? recorded.get(off) : undefined;
          if (pin !== undefined) {
            // The last owner started a delivery here (and may have stored it): batch it the same way.
            await flush();
            pinnedTo = pin;
          } else if (
            pinnedTo === undefined &&
            merge.length &&
            (!sameStream(merge[0].key, d.key) ||
              mergeEvents + d.events.length > this.config.mergeEvents ||
              recorded.has(off))
          )
            await flush();
          merge.push(d);
          mergeEvents += d.events.length;
          if (pinnedTo !== undefined && off >= pinnedTo) {
            pinnedTo = undefined;
            await flush();
          }
        }
        await heartbeat();
      }
      // A recorded range cut by the end of this fetch is not handled in part: left unresolved, it is
      // fetched again from its first offset with what follows.
      if (pinnedTo !== undefined) merge = [];
      if (ok && isRunning() && !isStale()) await flush();
    } finally {
      // Even when this batch fails (a heartbeat or commit refused while the broker is away, which
      // makes kafkajs restart its consumer), no delivery is left running unseen: each one settles
      // and, if stored, advances `next`, so the restarted consumer skips it instead of storing it
      // again under another token.
      while (inflight.length) await settleOldest();
    }
    if (commitTo > 0) await this.commit(p, commitTo);
  }

  /**
   * Commits partition `p` up to what was handled (`handled`, or what earlier batches handled),
   * no further than commitLimit allows; one commit at a time.
   */
  private commit(p: number, handled?: number): Promise<void> {
    if (handled !== undefined) this.handledTo.set(p, Math.max(handled, this.handledTo.get(p) ?? 0));
    const run = this.committing.then(() => this.commitNow(p, handled));
    this.committing = run.catch(() => {});
    return run;
  }

  private async commitNow(p: number, handled: number | undefined): Promise<void> {
    const limit = this.deps.commitLimit;
    let to = handled ?? this.handledTo.get(p) ?? 0;
    if (limit) {
      // Never below what the group had committed: a held replayed message was out at its old owner.
      const floor = Math.max((await this.committedAtJoin.get(p)) ?? 0, this.committedTo.get(p) ?? 0);
      to = Math.min(this.handledTo.get(p) ?? 0, limit(p) ?? 0);
      if (to <= floor || !this.assigned.has(p)) return;
    }
    if (to <= 0 || !this.consumer) return;
    await this.consumer.commitOffsets([{ topic: this.config.topic, partition: p, offset: String(to) }]);
    this.committedTo.set(p, to);
    this.c.commits++;
  }

  /** Commits every owned partition as far as commitLimit now allows (what held messages let out). */
  private commitReleased(): Promise<unknown> {
    // One round at a time: while the broker is away, rounds would pile up behind its retries.
    this.releasing ??= Promise.all(
      [...this.assigned].map((p) =>
        this.commit(p).catch((err) =>
          this.log('warn', `commit of ${this.config.topic}/${p}: ${(err as Error).message}`),
        ),
      ),
    ).finally(() => {
      this.releasing = undefined;
    });
    return this.releasing;
  }

  /**
   * The delivery ranges on record for partition `p` (read at join), read again while the store
   * cannot answer: held, heartbeating, and told as a store failure rather than failing the batch,
   * which kafkajs would retry a few times and then report as a consumer crash. Undefined when the
   * batch should end first (stopping, or a rebalance under way).
   */
  private async rangesOnRecord(
    p: number,
    committed: number,
    heartbeat: () => Promise<void>,
    current: () => boolean,
  ): Promise<Map<number, number> | undefined> {
    const b = this.deps.boundaries;
    if (!b) return new Map();
    try {
      const ranges = await this.beating(heartbeat, () =>
        retry(
          () => {
            const loading = this.recorded.get(p) ?? b.load(this.config.topic, p, committed);
            this.recorded.set(p, loading);
            return loading.catch((err) => {
              if (this.recorded.get(p) === loading) this.recorded.delete(p); // read again next attempt
              throw err;
            });
          },
          {
            attempts: Number.POSITIVE_INFINITY,
            maxDelayMs: 5_000,
            retryIf: current,
            onRetry: (err) => this.boundariesFailed(err as Error),
          },
        ),
      );
      this.boundariesAnswered();
      return ranges;
    } catch (err) {
      if (!current()) return undefined;
      throw err;
    }
  }

  /**
   * Runs `work` heartbeating every half interval, backoff waits included, so a held batch keeps the
   * member in its group. Half: kafkajs sends a heartbeat only once a full interval has passed since
   * the last one came back, so a timer of one interval skips every other beat, and two intervals
   * are the session timeout at the broker's smallest setting (6 s) with the default (3 s).
   */
  private async beating<T>(heartbeat: () => Promise<void>, work: () => Promise<T>): Promise<T> {
    const beat = setInterval(() => void heartbeat().catch(() => {}), this.config.heartbeatIntervalMs / 2);
    try {
      return await work();
    } finally {
      clearInterval(beat);
    }
  }

  private boundariesFailed(err: Error): void {
    if (!this.boundariesFailing) this.log('warn', `delivery ranges: ${err.message}; batch held and retried`);
    this.boundariesFailing = true;
    this.deps.onBoundariesRetry?.(err);
  }

  private boundariesAnswered(): void {
    if (!this.boundariesFailing) return;
    this.boundariesFailing = false;
    this.deps.onBoundariesRecovered?.();
  }

  /** True when a message with the same bytes came at another offset of the partition recently. */
  private isDuplicate(partition: number, m: KafkaMessage): boolean {
    const fp = createHash('sha1')
      .update(m.value ?? Buffer.alloc(0))
      .digest('base64');
    const seen = this.recent.get(partition) ?? new Map<string, number>();
    this.recent.set(partition, seen);
    const first = seen.get(fp);
    const off = Number(m.offset);
    if (first !== undefined) return first !== off;
    seen.set(fp, off);
    if (seen.size > DUPLICATE_WINDOW) seen.delete(seen.keys().next().value as string);
    return false;
  }

  private delivery(m: KafkaMessage, partition: number): Delivery {
    const key = m.key?.toString() ?? '';
    const offset = Number(m.offset);
    const topic = this.config.topic;
    if (!m.value || m.value.length === 0)
      return {
        key,
        partition,
        offset,
        events: [],
        undecodable: [{ raw: '', reason: 'empty message' }],
        topic,
        messages: [{ offset, events: 0, undecodable: 1 }],
      };
    const d = decodeBatch(m.value);
    const undecodable = d.undecodable.map((u) => ({
      raw: u.raw || m.value!.subarray(0, 4096).toString('base64'),
      reason: u.line > 0 ? `line ${u.line}: ${u.reason}` : u.reason,
    }));
    return {
      key,
      partition,
      offset,
      events: d.events,
      lines: d.lines,
      ...(undecodable.length ? { undecodable } : {}),
      topic,
      messages: [{ offset, events: d.events.length, undecodable: undecodable.length }],
    };
  }

  /**
   * Runs the handler until it succeeds (at least once), heartbeating meanwhile; false if stopped
   * first. It is handed the delivery only `after` the one before it in the partition was (then
   * calls `handed`): the ranges' records of deliveries in flight finish in any order, and the
   * detectors must see a partition in its order (a shard's mark after the records it covers; a
   * job stage's commit limit after the offsets below it).
   */
  private async deliver(
    d: Delivery,
    heartbeat: () => Promise<void>,
    isRunning: () => boolean,
    turn: Turn,
  ): Promise<boolean> {
    const first = d.messages?.[0]?.offset ?? d.offset;
    try {
      return await this.beating(heartbeat, () => this.deliverHeld(d, first, isRunning, turn));
    } finally {
      turn.handed(); // stopped before it was handed over: the rest of the batch is not held up
    }
  }

  /** deliver's attempts, each a record of the range and the handler, with backoff between them. */
  private async deliverHeld(
    d: Delivery,
    first: number,
    isRunning: () => boolean,
    turn: Turn,
  ): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      try {
        if (this.deps.boundaries) {
          // The range goes on record before the store write it names (see deps.boundaries).
          await this.deps.boundaries.record(this.config.topic, d.partition, first, d.offset).then(
            () => this.boundariesAnswered(),
            (err) => {
              this.boundariesFailed(err as Error);
              throw err;
            },
          );
          const mine = this.mine.get(d.partition) ?? new Map<number, number>();
          mine.set(first, Math.max(d.offset, mine.get(first) ?? d.offset));
          this.mine.set(d.partition, mine);
        }
        await turn.after;
        const handling = this.handler!(d);
        turn.handed();
        await handling;
        this.c.delivered_batches++;
        return true;
      } catch (err) {
        this.c.handler_errors++;
        this.c.redelivered_batches++;
        this.log(
          'warn',
          `batch ${d.partition}/${d.offset} failed (attempt ${attempt}), retrying: ${(err as Error).message}`,
        );
      }
      if (!isRunning()) return false;
      await sleep(Math.min(5_000, 50 * 2 ** Math.min(attempt, 7)));
      if (!isRunning()) return false;
    }
  }

  /** Resolves when everything queued is sent and, when consuming, the group has committed up to the end. */
  async drain(): Promise<void> {
    while (this.sending && !this.stopped) await this.sending;
    if (!this.consumer || this.stopped) return;
    const admin = await this.adminClient();
    const ends = await admin.fetchTopicOffsets(this.config.topic);
    while (!this.stopped) {
      const res = await admin.fetchOffsets({ groupId: this.config.group, topics: [this.config.topic] });
      const got = new Map((res[0]?.partitions ?? []).map((p) => [p.partition, Number(p.offset)]));
      if (
        ends.every((e) => Number(e.high) <= Number(e.low) || (got.get(e.partition) ?? -1) >= Number(e.high))
      )
        return;
      await sleep(200);
    }
  }

  /** Idempotent: sends what is queued, lets the batch in hand finish and commit, leaves the group. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    while (this.sending) await this.sending.catch(() => {});
    this.stopped = true;
    this.wakeSpace();
    clearInterval(this.commitTimer);
    // What came out since the last batch, committed while the member is still in its group (not
    // waited for past 5 s: with the broker away, the next owner redoes that stretch instead).
    if (this.deps.commitLimit && this.consumer)
      await Promise.race([this.commitReleased(), new Promise((r) => setTimeout(r, 5_000).unref())]);
    await this.consumer
      ?.disconnect()
      .catch((err) => this.log('warn', `leaving the group: ${(err as Error).message}`));
    await this.producer?.disconnect().catch(() => {});
    const admin = this.admin;
    this.admin = undefined;
    await admin?.then((a) => a.disconnect()).catch(() => {});
  }

  counters(): KafkaCounters {
    return { ...this.c };
  }
}
