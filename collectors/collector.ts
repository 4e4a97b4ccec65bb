/**
 * The collector's core: sources emit into one bounded buffer; a flush loop cuts it into batches
 * by key (job, else host) every `flushMs` or at `maxBatchEvents`, and hands them to the
 * publisher (HTTP to `rankwatch up`, Kafka, each usually wrapped in the disk spool). Memory is
 * bounded by `maxBufferedEvents`: past it the oldest events are dropped and counted. Every source
 * problem is counted and the first of each kind logged, never fatal to the others.
 * A publish that fails keeps its events (the bus is away, overloaded, or refuses the token: the
 * publisher's health says which); only an event the bus refuses on its own is dropped, counted as
 * `refused_by_bus`, and the rest of its batch delivered.
 */
import { hostname } from 'node:os';
import { RankwatchError } from '../core/errors.js';
import type { HostGroupKeys } from '../stream/host-groups.js';
import { publishIsolating } from '../stream/isolate.js';
import { type Batch, batchByKey, type Publisher } from '../stream/transport.js';
import type { ParseProblem } from './parsers/problems.js';
import { RankMap } from './ranks.js';
import { backoffMs, type Logger, type Source, type SourceDeps } from './source.js';

export interface CollectorOptions {
  publisher: Publisher;
  logger: Logger;
  now?: () => number;
  flushMs?: number;
  maxBatchEvents?: number;
  maxBufferedEvents?: number;
  /** Extra figures merged into counters() (e.g. the spool's). */
  extraCounters?: () => Record<string, number>;
  /** Host-group keys (the sharded layout); unset, batches are keyed by job. */
  keys?: HostGroupKeys;
}

export interface CollectorCounters {
  events_read: number;
  events_sent: number;
  events_dropped: number;
  dropped_by_reason: Record<string, number>;
  parse_errors: Record<string, number>;
  /** Samples of fields a source does not use, by source and field. */
  ignored_fields: Record<string, Record<string, number>>;
  source_errors: Record<string, number>;
  /** Input records a source held and could not use, by source and reason (not events: see docs). */
  records_dropped: Record<string, Record<string, number>>;
  publish_errors: number;
  buffered: number;
  [extra: string]: unknown;
}

export class Collector {
  private buffer: unknown[] = [];
  private sources: Source[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private stopped = false;
  /** Failed publishes in a row: the next attempt waits flushMs · 2^n (at most 30 s). */
  private failuresInRow = 0;
  private retryAt = 0;
  private readonly flushMs: number;
  private readonly maxBatch: number;
  private readonly maxBuffered: number;
  private readonly pciMap = new Map<string, number>();
  /** Learnt from the step events hooks send through this collector (handOff); read by sources. */
  private ranks: RankMap | undefined;
  private readonly c = {
    events_read: 0,
    events_sent: 0,
    events_dropped: 0,
    dropped_by_reason: {} as Record<string, number>,
    parse_errors: {} as Record<string, number>,
    ignored_fields: {} as Record<string, Record<string, number>>,
    source_errors: {} as Record<string, number>,
    records_dropped: {} as Record<string, Record<string, number>>,
    publish_errors: 0,
  };

  constructor(private readonly o: CollectorOptions) {
    this.flushMs = o.flushMs ?? 1000;
    this.maxBatch = o.maxBatchEvents ?? 5000;
    this.maxBuffered = o.maxBufferedEvents ?? 200_000;
  }

  /** What sources are given: emit into the buffer, report problems into the counters. */
  deps(host: string): SourceDeps {
    const log = this.o.logger;
    this.ranks ??= new RankMap({ localHosts: [host, hostname()] });
    return {
      host,
      logger: log,
      now: this.o.now ?? Date.now,
      pciMap: this.pciMap,
      ranks: this.ranks,
      dropped: (source: string, reason: string, n: number, detail?: string) => {
        this.c.records_dropped[source] ??= {};
        const mine = this.c.records_dropped[source];
        const before = mine[reason] ?? 0;
        mine[reason] = before + n;
        // The first of each reason with its why, then one line per power of ten.
        if (before === 0 || Math.floor(Math.log10(before + n)) > Math.floor(Math.log10(Math.max(1, before))))
          log.warn(
            `${source}: dropped ${n} record(s), ${reason}${detail ? `: ${detail}` : ''} [${before + n} so far]`,
          );
      },
      emit: (events) => this.accept(events),
      parseProblems: (source: string, problems: ParseProblem[]) => {
        const before = this.c.parse_errors[source] ?? 0;
        this.c.parse_errors[source] = before + problems.length;
        // The first few in full, then one line per power of ten, so a bad input cannot flood the log.
        for (let i = 0; i < problems.length; i++) {
          const n = before + i + 1;
          if (n <= 5 || Number.isInteger(Math.log10(n)))
            log.warn(
              `${source}: line ${problems[i].line}: ${problems[i].reason}${problems[i].raw ? ` (${problems[i].raw.slice(0, 120)})` : ''} [${n} so far]`,
            );
        }
      },
      ignoredFields: (source: string, fields: Record<string, number>) => {
        this.c.ignored_fields[source] ??= {};
        const mine = this.c.ignored_fields[source];
        for (const [f, n] of Object.entries(fields)) mine[f] = (mine[f] ?? 0) + n;
      },
      sourceError: (source: string, err: unknown) => {
        const n = (this.c.source_errors[source] ?? 0) + 1;
        this.c.source_errors[source] = n;
        if (n <= 5 || Number.isInteger(Math.log10(n)))
          log.warn(`${source}: ${(err as Error)?.message ?? String(err)} (retrying) [${n} so far]`);
      },
    };
  }

  /** Starts the flush loop, then the sources (already created with `deps()`). */
  start(sources: Source[]): void {
    this.sources = sources;
    this.schedule();
    for (const s of sources) {
      try {
        s.start();
      } catch (err) {
        this.deps('').sourceError(s.name, err);
      }
    }
  }

  /**
   * Idempotent: stops sources first, sends what they produced, then stops the publisher. Resolves
   * with the events it had to abandon (the bus refused them to the end and no spool took them),
   * counted as `abandoned_at_stop`; a caller exits non-zero when there are any.
   */
  async stop(): Promise<number> {
    if (this.stopped) return 0;
    this.stopped = true;
    clearTimeout(this.timer);
    await Promise.allSettled(this.sources.map((s) => s.stop()));
    await this.flushing;
    for (let tries = 0; this.buffer.length > 0 && tries < 3; tries++) {
      if (tries > 0) await new Promise((r) => setTimeout(r, 200 * tries));
      await this.flush();
    }
    const abandoned = this.buffer.length;
    if (abandoned > 0) {
      this.buffer = [];
      this.drop('abandoned_at_stop', abandoned);
    }
    await this.o.publisher.stop();
    return abandoned;
  }

  counters(): CollectorCounters {
    return {
      ...this.c,
      dropped_by_reason: { ...this.c.dropped_by_reason },
      parse_errors: { ...this.c.parse_errors },
      ignored_fields: Object.fromEntries(
        Object.entries(this.c.ignored_fields).map(([k, v]) => [k, { ...v }]),
      ),
      source_errors: { ...this.c.source_errors },
      records_dropped: Object.fromEntries(
        Object.entries(this.c.records_dropped).map(([k, v]) => [k, { ...v }]),
      ),
      buffered: this.buffer.length,
      ...this.o.extraCounters?.(),
    };
  }

  /** Sends everything buffered now (one flush at a time). */
  flush(): Promise<void> {
    this.flushing ??= this.flushOnce().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }

  private accept(events: unknown[]): void {
    this.c.events_read += events.length;
    for (const e of events) this.buffer.push(e);
    const over = this.buffer.length - this.maxBuffered;
    if (over > 0) {
      this.buffer.splice(0, over);
      this.drop('buffer_full', over);
    }
    if (this.buffer.length >= this.maxBatch && !this.flushing && Date.now() >= this.retryAt)
      void this.flush();
  }

  private async flushOnce(): Promise<void> {
    while (this.buffer.length > 0) {
      const events = this.buffer.splice(0, this.maxBatch);
      const batches: Batch[] = this.keyed(events);
      const refusedBefore = this.c.dropped_by_reason.refused_by_bus ?? 0;
      try {
        await publishIsolating(this.o.publisher, batches, (e, reason) => this.refuse(e, reason));
        this.failuresInRow = 0;
        this.retryAt = 0;
        this.c.events_sent +=
          events.length - ((this.c.dropped_by_reason.refused_by_bus ?? 0) - refusedBefore);
      } catch (err) {
        this.c.publish_errors++;
        if (err instanceof RankwatchError && err.code === 'RANKWATCH_ERR_STOPPED') {
          this.drop('publisher_stopped', events.length);
          this.o.logger.warn(`publisher stopped, dropped ${events.length} events`);
          return;
        }
        // Whatever the failure (bus away, 5xx, a refused token), keep them (bounded) and try again
        // after a growing wait; the publisher's health check names the reason, logged once.
        this.failuresInRow++;
        this.retryAt = Date.now() + backoffMs(this.failuresInRow, this.flushMs);
        this.buffer.unshift(...events);
        const over = this.buffer.length - this.maxBuffered;
        if (over > 0) {
          this.buffer.splice(0, over);
          this.drop('buffer_full', over);
        }
        return;
      }
    }
  }

  /** An event the bus refuses on its own: dropped with one clear, counted reason. */
  refuse(event: unknown, reason: string): void {
    this.drop('refused_by_bus', 1);
    const n = this.c.dropped_by_reason.refused_by_bus;
    if (n <= 5 || Number.isInteger(Math.log10(n))) {
      const bytes = Buffer.byteLength(JSON.stringify(event) ?? '');
      this.o.logger.warn(`dropped one event of ${bytes} bytes the bus refuses: ${reason} [${n} so far]`);
    }
  }

  /**
   * Events from a local sender (a training hook) that is answered once they are handed off:
   * through `durable` (the spool) when given, so the answer means "on disk"; else into the buffer.
   */
  async handOff(events: unknown[], durable?: (batches: Batch[]) => Promise<void>): Promise<void> {
    // Hooks' steps say which process is which rank, and where its steps end.
    this.ranks?.learn(events);
    if (!durable) return this.accept(events);
    this.c.events_read += events.length;
    await durable(this.keyed(events));
    this.c.events_sent += events.length;
  }

  private keyed(events: unknown[]): Batch[] {
    return this.o.keys ? this.o.keys.batch(events) : batchByKey(events);
  }

  private drop(reason: string, n: number): void {
    this.c.events_dropped += n;
    this.c.dropped_by_reason[reason] = (this.c.dropped_by_reason[reason] ?? 0) + n;
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(
      () => {
        void this.flush().finally(() => this.schedule());
      },
      Math.max(this.flushMs, this.retryAt - Date.now()),
    );
    this.timer.unref?.();
  }
}
