/**
 * The bus between collectors and detectors. Producers publish batches of events keyed by job
 * (or by host for telemetry without a job), so one consumer sees every rank of a job in order.
 * Consumers get batches and acknowledge each by resolving the handler's promise: a batch whose
 * handler rejects is delivered again (at least once), so handlers must be idempotent.
 *
 * Two implementations: `memory` (in-process, the embedded default) and `kafka` (at scale).
 */

export interface Batch {
  /** Partitioning key: the job id, or the host for events without a job. */
  key: string;
  events: unknown[];
  /**
   * The JSON text of each event as it arrived, aligned with `events`, when the publisher has it
   * (ingest): the write-ahead log and the raw-event table take it as is instead of encoding again.
   */
  lines?: string[];
  /**
   * Lines ingest rejected, with their reason: delivered (as `Delivery.undecodable`) for the
   * pipeline to set aside as dead letters. Carried by the write-ahead log and the in-process bus.
   */
  undecodable?: { raw: string; reason: string; line?: number }[];
}

export interface Delivery {
  key: string;
  partition: number;
  /** Position of the batch in its partition; increases by one per batch. */
  offset: number;
  events: unknown[];
  /** The text each event arrived as, aligned with `events`, when the transport decoded bytes. */
  lines?: string[];
  /** Payloads the transport could not decode, with the reason, for the dead-letter sink. */
  undecodable?: { raw: string; reason: string; line?: number }[];
  /** The input line each event was read from, aligned with `events` (file sources). */
  lineNumbers?: number[];
  /**
   * The bus messages this delivery holds, in order (Kafka): each one's offset and how many of
   * `events` and `undecodable` came from it. The store deduplicates per message, so a message
   * batched with others after a crash never counts twice.
   */
  messages?: { offset: number; events: number; undecodable: number }[];
  /** The topic the messages were read from. */
  topic?: string;
}

export type DeliveryHandler = (delivery: Delivery) => Promise<void>;

export interface TransportCounters {
  published_batches: number;
  published_events: number;
  delivered_batches: number;
  redelivered_batches: number;
  handler_errors: number;
}

/** Counters of a transport that has done nothing yet. */
export function zeroCounters(): TransportCounters {
  return {
    published_batches: 0,
    published_events: 0,
    delivered_batches: 0,
    redelivered_batches: 0,
    handler_errors: 0,
  };
}

/** The producer side alone: what collectors hold (Kafka, HTTP to `rankwatch up`, or the in-process bus). */
export interface Publisher {
  readonly type: string;
  /** Sends batches; resolves once the bus holds them (may wait under backpressure). */
  publish(batches: Batch[]): Promise<void>;
  /** Idempotent; flushes what it holds, then releases resources. */
  stop(): Promise<void>;
}

export interface Transport extends Publisher {
  /** Starts delivering to `handler`; resolves once subscribed. One handler per transport. */
  consume(handler: DeliveryHandler): Promise<void>;
  /** Resolves when everything published so far has been acknowledged. */
  drain(): Promise<void>;
  /** Idempotent; stops delivery after the batch in flight and releases resources. */
  stop(): Promise<void>;
  counters(): TransportCounters;
  /**
   * A recorded input that ends (a file): once it is drained, jobs that never said `finished` end
   * as the live run would have ended them. Live buses leave it unset.
   */
  readonly bounded?: boolean;
  /** What it reads, when more than its type says (a file's path): named in the topology line. */
  readonly name?: string;
  /** Stops fetching while the store holds a batch back (Kafka); delivery resumes on `resume`. */
  pause?(): void;
  resume?(): void;
}

/** Key for an event: its job, else its host, else a fixed key. */
export function keyOf(event: unknown): string {
  const e = event as { job?: unknown; host?: unknown };
  if (typeof e.job === 'string' && e.job) return e.job;
  if (typeof e.host === 'string' && e.host) return `host:${e.host}`;
  return '_';
}

/**
 * Groups events into one batch per key, keeping their order within each key; `lines` (the text
 * of each event, aligned with `events`) are grouped with their events. With `maxEvents`, a key's
 * events past it go to further batches of that key, in order.
 */
export function batchByKey(
  events: unknown[],
  lines?: string[],
  maxEvents = Number.POSITIVE_INFINITY,
): Batch[] {
  const byKey = new Map<string, Batch>();
  const out: Batch[] = [];
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    const k = keyOf(e);
    let b = byKey.get(k);
    if (!b || b.events.length >= maxEvents) {
      b = lines ? { key: k, events: [], lines: [] } : { key: k, events: [] };
      byKey.set(k, b);
      out.push(b);
    }
    b.events.push(e);
    if (lines) b.lines!.push(lines[i]);
  }
  return out;
}

/** FNV-1a, the same partition for the same key on every run. */
export function partitionOf(key: string, partitions: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % partitions;
}
