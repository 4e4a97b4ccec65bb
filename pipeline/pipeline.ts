/**
 * The detection pipeline, whatever the bus and store: take a delivered batch, set malformed
 * events aside with their reason, run the detectors, write events and output to the store, then
 * acknowledge. A store that is down is retried with backoff while the batch is held, so the bus
 * stops delivering and producers feel the backpressure; nothing is dropped.
 */
import { retry } from '../core/errors.js';
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
  onDeadLetters?: (rows: DeadLetter[]) => void;
  onStoreRetry?: (err: unknown, attempt: number) => void;
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

  /** Idempotent: drains, then stops the bus. The store is the caller's to close. */
  async stop(): Promise<void> {
    if (!this.started) return;
    this.started = false;
    await this.drain();
    this.abort.abort();
    await this.o.transport.stop();
  }

  counters(): PipelineCounters {
    return { ...this.c };
  }

  async handle(d: Delivery): Promise<void> {
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
    await this.write(good, bad, this.runner.take(), d.lines ? goodLines : undefined);
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
  ): Promise<void> {
    this.c.dead_letters += bad.length;
    this.c.findings += out.findings.length;
    this.c.mfu_points += out.mfu.length;
    if (bad.length) this.o.onDeadLetters?.(bad);
    if (this.o.store) {
      const batches: InsertBatch[] = [
        ...(this.o.storeEvents === false ? [stepRows(good)] : eventRows(good, lines)),
        ...deadLetterRows(bad),
        ...outputRows(out),
      ];
      const store = this.o.store;
      await retry(() => store.insert(batches), {
        attempts: Number.POSITIVE_INFINITY,
        signal: this.abort.signal,
        onRetry: (err, attempt) => {
          this.c.store_retries++;
          this.o.onStoreRetry?.(err, attempt);
        },
      });
    }
    if (out.findings.length) this.o.onFindings?.(out.findings);
  }
}
