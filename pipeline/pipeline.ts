/**
 * The detection pipeline, whatever the bus and store: take a delivered batch, set malformed
 * events aside with their reason, run the detectors, write events and output to the store, then
 * acknowledge. A store that is down is retried with backoff while the batch is held, so the bus
 * stops delivering and producers feel the backpressure; nothing is dropped.
 */
import { isRetriable, RankwatchError, retry } from '../core/errors.js';
import { type DetectorOutput, DetectorRunner } from '../detectors/runner.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { validateEvent } from '../schema/validate.js';
import {
  type DeadLetter,
  deadLetterRows,
  eventRows,
  type InsertBatch,
  outputRows,
  stepRows,
} from '../store/rows.js';
import type { Store } from '../store/store.js';
import type { Delivery, Transport } from '../stream/transport.js';

export interface PipelineOptions {
  transport: Transport;
  store?: Store;
  runner?: DetectorRunner;
  /**
   * Keep raw events in the store (on by default). Off keeps steps, detector output and dead
   * letters; what views derive from raw events (GPU minutes, faults, checkpoints, job lifecycle)
   * then stays empty.
   */
  storeEvents?: boolean;
  onFindings?: (findings: Finding[]) => void;
  /** Valid events once stored (e.g. health checks for the repair loop); must return at once. */
  onEvents?: (events: RankwatchEvent[]) => void;
  onDeadLetters?: (rows: DeadLetter[]) => void;
  onStoreRetry?: (err: unknown, attempt: number) => void;
  /**
   * Once stopping, a store write that has kept failing this long is abandoned: its batch stays
   * unacknowledged (Kafka delivers it again to the next owner) and shutdown goes on (default 10 s).
   */
  stopGraceMs?: number;
}

export interface PipelineCounters {
  batches: number;
  events: number;
  dead_letters: number;
  findings: number;
  mfu_points: number;
  store_retries: number;
}

export class Pipeline {
  readonly runner: DetectorRunner;
  private readonly c: PipelineCounters = {
    batches: 0,
    events: 0,
    dead_letters: 0,
    findings: 0,
    mfu_points: 0,
    store_retries: 0,
  };
  private readonly abort = new AbortController();
  private started = false;
  private stopping = false;
  private stopped: Promise<void> | undefined;
  private closed: Promise<void> | undefined;
  private readonly inflight = new Set<Promise<void>>();
  /** When the write in hand first failed; unset while the store takes writes. */
  private failingSince: number | undefined;

  constructor(private readonly o: PipelineOptions) {
    this.runner = o.runner ?? new DetectorRunner();
  }

  /** Starts the store first, then consumption, so nothing is read that cannot be written. */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    await this.o.store?.migrate();
    await this.o.transport.consume((d) => this.handle(d));
  }

  /** Waits for everything published to be processed, flushes the detectors and writes what remains. */
  async drain(): Promise<void> {
    await this.o.transport.drain();
    this.runner.flush();
    await this.write([], [], this.runner.take());
  }

  /**
   * Idempotent: drains, then stops the bus. The store is the caller's to close. With the store
   * down past `stopGraceMs`, it stops without draining and rejects with STORE_UNAVAILABLE: what
   * was not written stays unacknowledged on the bus.
   */
  stop(): Promise<void> {
    this.stopped ??= this.started ? this.drainAndClose() : Promise.resolve();
    return this.stopped;
  }

  private async drainAndClose(): Promise<void> {
    this.stopping = true;
    const draining = this.drain();
    const abandoned = new Promise<void>((r) => this.abort.signal.addEventListener('abort', () => r()));
    const drained = await Promise.race([draining.then(() => true), abandoned.then(() => false)]);
    await this.close();
    if (!drained) {
      await draining.catch(() => {}); // settles at once: the bus is closed and writes give up
      throw new RankwatchError(
        'RANKWATCH_ERR_STORE_UNAVAILABLE',
        `stopped without draining: the store failed every write for ${this.grace() / 1000} s; ` +
          'batches not written stay unacknowledged on the bus',
      );
    }
  }

  /**
   * Stops the bus without draining (Kafka: the batch in hand finishes and is committed, the rest
   * waits for the next owner). A batch whose write keeps failing is abandoned after the grace
   * period, unacknowledged, so shutdown does not wait for the store to come back.
   */
  close(): Promise<void> {
    this.closed ??= (async () => {
      this.started = false;
      this.stopping = true;
      if (this.failingSince !== undefined && Date.now() - this.failingSince >= this.grace())
        this.abort.abort();
      await this.o.transport.stop();
      // Batches in hand finish (or give up after the grace period, see write) before close resolves.
      await Promise.allSettled(this.inflight);
      this.abort.abort();
    })();
    return this.closed;
  }

  private grace(): number {
    return this.o.stopGraceMs ?? 10_000;
  }

  counters(): PipelineCounters {
    return { ...this.c };
  }

  handle(d: Delivery): Promise<void> {
    const p = this.process(d);
    this.inflight.add(p);
    const forget = () => this.inflight.delete(p);
    p.then(forget, forget);
    return p;
  }

  private async process(d: Delivery): Promise<void> {
    const good: RankwatchEvent[] = [];
    const goodLines: (string | undefined)[] = [];
    const bad: DeadLetter[] = [];
    const now = Date.now();
    for (const raw of d.undecodable ?? [])
      bad.push({ ts: now, source: d.key, reason: raw.reason, raw: raw.raw });
    for (let i = 0; i < d.events.length; i++) {
      const value = d.events[i];
      const v = validateEvent(value);
      if (v.ok) {
        good.push(v.event);
        goodLines.push(d.lines?.[i]);
        this.runner.push(v.event);
      } else {
        bad.push({
          ts: now,
          source: d.key,
          reason: v.reason,
          raw: d.lines?.[i] ?? JSON.stringify(value) ?? String(value),
        });
      }
    }
    this.c.batches++;
    this.c.events += good.length;
    await this.write(good, bad, this.runner.take(), d.lines ? goodLines : undefined, d.key);
  }

  /**
   * Rebuilds detector state from a batch that was processed (and stored) before, e.g. by another
   * consumer that owned its partition: the detectors see its events, their output is dropped, so
   * a new owner goes on where the old one stopped without re-opening its findings.
   */
  replay(d: Delivery): void {
    for (const value of d.events) {
      const v = validateEvent(value);
      if (v.ok) this.runner.push(v.event);
    }
    this.runner.take();
  }

  private async write(
    good: RankwatchEvent[],
    bad: DeadLetter[],
    out: DetectorOutput,
    lines?: (string | undefined)[],
    source = '',
  ): Promise<void> {
    this.c.dead_letters += bad.length;
    this.c.findings += out.findings.length;
    this.c.mfu_points += out.mfu.length;
    if (bad.length) this.o.onDeadLetters?.(bad);
    if (this.o.store) {
      try {
        await this.insert([...this.eventBatches(good, lines), ...deadLetterRows(bad), ...outputRows(out)]);
      } catch (err) {
        if (isRetriable(err) || this.abort.signal.aborted || good.length === 0) throw err;
        // Refused for good, not an outage: find the events the store refuses, set them aside with
        // its reason, and store the rest, so one bad event cannot hold its batch forever.
        const refused: DeadLetter[] = [];
        await this.storeOrSetAside(good, lines, source, refused);
        this.c.dead_letters += refused.length;
        this.c.events -= refused.length;
        if (refused.length) this.o.onDeadLetters?.(refused);
        await this.insert([...deadLetterRows([...bad, ...refused]), ...outputRows(out)]);
      }
    }
    if (good.length) this.o.onEvents?.(good);
    if (out.findings.length) this.o.onFindings?.(out.findings);
  }

  private eventBatches(events: RankwatchEvent[], lines?: (string | undefined)[]): InsertBatch[] {
    return this.o.storeEvents === false ? [stepRows(events)] : eventRows(events, lines);
  }

  /** Halves a refused batch until each event the store refuses stands alone, then sets it aside. */
  private async storeOrSetAside(
    events: RankwatchEvent[],
    lines: (string | undefined)[] | undefined,
    source: string,
    refused: DeadLetter[],
  ): Promise<void> {
    try {
      await this.insert(this.eventBatches(events, lines));
    } catch (err) {
      if (isRetriable(err) || this.abort.signal.aborted) throw err;
      if (events.length === 1) {
        refused.push({
          ts: Date.now(),
          source,
          reason: `the store refused it: ${(err as Error).message.slice(0, 500)}`,
          raw: lines?.[0] ?? JSON.stringify(events[0]),
        });
        return;
      }
      const half = events.length >> 1;
      await this.storeOrSetAside(events.slice(0, half), lines?.slice(0, half), source, refused);
      await this.storeOrSetAside(events.slice(half), lines?.slice(half), source, refused);
    }
  }

  /** Inserts, retrying an unavailable store with backoff for as long as it takes (or until stopped). */
  private async insert(batches: InsertBatch[]): Promise<void> {
    const store = this.o.store!;
    await retry(() => store.insert(batches), {
      attempts: Number.POSITIVE_INFINITY,
      signal: this.abort.signal,
      onRetry: (err, attempt) => {
        this.c.store_retries++;
        this.failingSince ??= Date.now();
        if (this.stopping && Date.now() - this.failingSince >= this.grace()) this.abort.abort();
        this.o.onStoreRetry?.(err, attempt);
      },
    });
    this.failingSince = undefined;
  }
}
