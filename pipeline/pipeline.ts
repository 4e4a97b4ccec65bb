/**
 * The detection pipeline, whatever the bus and store: take a delivered batch, set malformed
 * events aside with their reason, run the detectors, write events and output to the store, hand
 * findings and dead letters to the sinks, then acknowledge. A store that is down is retried with
 * backoff while the batch is held, so the bus stops delivering and producers feel the
 * backpressure; nothing is dropped. Commands build one with `buildPipeline` (pipeline/build.ts).
 */
import { RankwatchError, retry } from '../core/errors.js';
import { DetectorRunner } from '../detectors/runner.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import type { DetectorOutput } from '../schema/output.js';
import { eventProblem, parseEventLine, validateEvent } from '../schema/validate.js';
import { latestEventTs, rawEventsBetween } from '../store/queries.js';
import {
  type DeadLetter,
  deadLetterRows,
  eventRows,
  type InsertBatch,
  outputRows,
  SPARSE_KINDS,
} from '../store/rows.js';
import type { Store } from '../store/store.js';
import type { Delivery, Transport } from '../stream/transport.js';
import { CommitLimits, type Take } from './commit-limits.js';
import type { DeadLetterSink, FindingSink } from './sinks.js';

/**
 * A runner that holds input back until other input comes (a job stage waits for its shards'
 * records, detectors/job-stage.ts): told where each input was read and whether it is replayed,
 * it says what it still holds, so its partitions are committed no further (pipeline/commit-limits.ts).
 */
export interface Holds {
  /** What is pushed next was read at `offset` of `topic/partition`; replayed: a committed stretch rebuilt. */
  position(topic: string, partition: number, offset: number, replayed: boolean): void;
  /** Per `topic/partition`, the lowest offset whose events it holds. */
  heldFrom(): ReadonlyMap<string, number>;
  /** Drops the output of replayed input; what live input it released meanwhile comes with the next take. */
  dropReplayed(): void;
  /** The latest event time of its input, records included (a sharded job's events come in them). */
  inputTime(): number;
}

export interface PipelineOptions {
  transport: Transport;
  store?: Store;
  runner?: DetectorRunner;
  /**
   * Keep raw events in the store (on by default). Off keeps steps, detector output, dead letters
   * and the few raw events of SPARSE_KINDS (faults, checkpoints, job lifecycle: their views keep
   * working); GPU samples and collectives are not kept, so the GPU-minute rollup stays empty.
   */
  storeEvents?: boolean;
  /** Every finding event goes to each, in order, before its delivery is acknowledged. */
  findingSinks?: FindingSink[];
  /** Every dead letter goes to each (besides the store), before its delivery is acknowledged. */
  deadLetterSinks?: DeadLetterSink[];
  /** Valid events once stored (e.g. health checks for the repair loop); must return at once. */
  onEvents?: (events: RankwatchEvent[]) => void;
  /** A delivery was stored and sunk, just before it is acknowledged (e.g. the bus is healthy). */
  onHandled?: (d: Delivery) => void;
  /** Names the store in the topology line (default: its type). */
  storeName?: string;
  onStoreRetry?: (err: unknown, attempt: number) => void;
  /** Told when a store write succeeds after failed attempts (the end of an outage). */
  onStoreRecovered?: () => void;
  /**
   * Once stopping, a store write that has kept failing this long is abandoned: its batch stays
   * unacknowledged (Kafka delivers it again to the next owner) and shutdown goes on (default 10 s).
   */
  stopGraceMs?: number;
  /**
   * With no batch for this long, the detectors' quiet-job clock moves on by the wall time passed
   * since the last batch, so jobs that stop sending steps go stale and end (default 30 s; 0 = never).
   */
  idleAdvanceMs?: number;
  /**
   * The sharded layout (docs/operations.md, "Capacity"). A shard stage's records for its job stage
   * (`shard` in the detectors' output) go here before their delivery is acknowledged.
   */
  shardSink?: (records: unknown[]) => Promise<void>;
  /**
   * A job stage's topic of shard records: its deliveries go to `onShardRecords` instead of being
   * validated and stored (the shards stored what the records came from).
   */
  shardRecordsTopic?: string;
  onShardRecords?: (records: unknown[]) => void;
  /** The runner, when it holds input back (a job stage): then `commitLimit` says how far to commit. */
  holds?: Holds;
}

export interface PipelineCounters {
  batches: number;
  events: number;
  dead_letters: number;
  findings: number;
  mfu_points: number;
  store_retries: number;
}

/** What one delivery produced, once stored. */
export interface Handled {
  deadLetters: DeadLetter[];
  findings: Finding[];
  /** A shard stage's records for its job stage, and their send (`sendShard`), begun when they were made. */
  shard?: unknown[];
  shardSent?: Promise<void>;
  /** With a runner that holds input: the commit limits this output makes true once out. */
  take?: Take;
}

export interface StoreHealth {
  /** Epoch ms of the first failure of the write in hand; undefined while writes go through. */
  failingSince: number | undefined;
  /** The last failure's message while failing. */
  reason: string | undefined;
  /** Store write retries since start. */
  retries: number;
}

/** A delivery's valid events [start, end), with its dedup token and each event's bus offset when it has them. */
interface Group {
  start: number;
  end: number;
  token?: string;
  offsets?: number[];
  topic?: string;
  partition?: number;
}

/** The store refuses these rows themselves: the only failure that sets events aside. */
function refusal(err: unknown): boolean {
  return err instanceof RankwatchError && err.code === 'RANKWATCH_ERR_STORE_REFUSED';
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
  private readonly inflight = new Set<Promise<unknown>>();
  /** When the write in hand first failed; unset while the store takes writes. */
  private failingSince: number | undefined;
  /** Latest event time delivered, and when (wall clock): an idle bus advances event time from there. */
  private eventTime = 0;
  private deliveredAt = Date.now();
  private idleTimer: NodeJS.Timeout | undefined;
  private lastError: string | undefined;
  /** The partition each key (a job, or a host) was last delivered from, for forgetPartitions(). */
  private readonly partitionOf = new Map<string, number>();
  /** A delivery stored but not yet sunk (a sink failed): its redelivery sinks without storing again. */
  private readonly stored = new WeakMap<Delivery, Handled>();
  private paused = false;
  /** The shard records sent last (settled either way): the next send goes after it. */
  private shardSends: Promise<unknown> = Promise.resolve();
  private readonly limits: CommitLimits | undefined;

  constructor(private readonly o: PipelineOptions) {
    this.runner = o.runner ?? new DetectorRunner();
    this.limits = o.holds ? new CommitLimits() : undefined;
  }

  /**
   * With a runner that holds input (a job stage): the offset of `topic/partition` below which every
   * message's output is stored and sunk, so a commit there loses nothing held; undefined: none yet.
   */
  commitLimit(topic: string, partition: number): number | undefined {
    return this.limits?.limit(topic, partition);
  }

  /** The runner's output, for a write, with the commit limits it makes true once written. */
  private take(): { out: DetectorOutput; take?: Take } {
    const out = this.runner.take();
    return { out, take: this.limits?.taken(this.o.holds!.heldFrom()) };
  }

  /** The input pushed next was read at `offset` of the delivery's partition (live or replayed). */
  private reading(d: Delivery, offset: number, replayed: boolean): void {
    if (!this.o.holds || d.topic === undefined) return;
    this.o.holds.position(d.topic, d.partition, offset, replayed);
    if (!replayed) this.limits!.reading(d.topic, d.partition, offset);
  }

  /** Where events come from and where what they produce goes, in one line for the start-up log. */
  describe(): string {
    const t = this.o.transport;
    const detectors = this.runner.detectorNames();
    const parts = [
      `pipeline: ${t.type}${t.name ? ` ${t.name}` : ''}`,
      `${detectors.length} detectors (${detectors.join(', ')})`,
      `store: ${this.o.store ? (this.o.storeName ?? this.o.store.type) : 'none'}`,
    ];
    const sinks = (label: string, list: { name: string }[] | undefined) =>
      list?.length ? [`${label}: ${list.map((s) => s.name).join(', ')}`] : [];
    return [
      parts.join(' → '),
      ...sinks('findings', this.o.findingSinks),
      ...sinks('dead letters', this.o.deadLetterSinks),
    ].join(' · ');
  }

  /**
   * Starts the store first, then consumption, so nothing is read that cannot be written. A failed
   * start (store or bus down) can be tried again.
   */
  async start(): Promise<void> {
    if (this.started) return;
    await this.o.store?.migrate();
    await this.o.transport.consume(async (d) => {
      await this.handle(d);
    });
    this.started = true;
    const idle = this.o.idleAdvanceMs ?? 30_000;
    if (idle > 0) this.idleTimer = setInterval(() => this.advanceIdle(idle), idle).unref();
  }

  /** The bus is idle: event time has moved on by the wall time since the last batch. */
  private advanceIdle(idleMs: number): void {
    const since = Date.now() - this.deliveredAt;
    if (since < idleMs || this.eventTime === 0 || this.stopping) return;
    this.runner.advance(this.eventTime + since);
    const { out, take } = this.take();
    const sent = this.sendShard(out.shard);
    if (
      out.findings.length +
        out.mfu.length +
        out.rollups.length +
        (out.slowGpus?.length ?? 0) +
        (out.shard?.length ?? 0) ===
      0
    ) {
      // Nothing to write: what it released (if anything) is out once the takes before it are.
      if (take) this.limits!.written(take);
      return;
    }
    // Rejects only when stopping with the store down; the next run ends the job again, at the same ts.
    const p = this.write([], [], out)
      .then(() => this.sink(out.findings, [], undefined, sent))
      .then(() => take && this.limits!.written(take))
      .catch(() => {});
    this.inflight.add(p);
    p.then(() => this.inflight.delete(p));
  }

  /** Waits for everything published to be processed, flushes the detectors and writes what remains. */
  async drain(): Promise<void> {
    await this.o.transport.drain();
    // A recorded input is over: jobs that never said `finished` end as the live run would end them.
    if (this.o.transport.bounded) this.runner.endOfInput();
    else this.runner.flush();
    const { out, take } = this.take();
    const sent = this.sendShard(out.shard);
    await this.write([], [], out);
    await this.sink(out.findings, [], undefined, sent);
    if (take) this.limits!.written(take);
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
      clearInterval(this.idleTimer);
      if (this.failingSince !== undefined && Date.now() - this.failingSince >= this.grace())
        this.abort.abort();
      await this.o.transport.stop();
      // Batches in hand finish (or give up after the grace period, see write) before close resolves.
      await Promise.allSettled(this.inflight);
      this.abort.abort();
      for (const s of [...(this.o.findingSinks ?? []), ...(this.o.deadLetterSinks ?? [])]) await s.close?.();
    })();
    return this.closed;
  }

  private grace(): number {
    return this.o.stopGraceMs ?? 10_000;
  }

  counters(): PipelineCounters {
    return { ...this.c };
  }

  /**
   * Processes one delivery; resolves, once it is stored, with that delivery's own dead letters and
   * findings (a transport that forwards them, e.g. Kafka's dead-letter topic, sends these and no
   * other delivery's).
   */
  handle(d: Delivery): Promise<Handled> {
    this.partitionOf.set(d.key, d.partition);
    const p = this.processAndSink(d);
    this.inflight.add(p);
    const forget = () => this.inflight.delete(p);
    p.then(forget, forget);
    return p;
  }

  /** The store's state for health reports: since when writes fail and why (unset while they go through). */
  storeHealth(): StoreHealth {
    return {
      failingSince: this.failingSince,
      reason: this.failingSince === undefined ? undefined : this.lastError,
      retries: this.c.store_retries,
    };
  }

  private async processAndSink(d: Delivery): Promise<Handled> {
    const again = this.stored.get(d);
    // A delivery tried again (a sink or send failed): its records go again, behind later ones;
    // the job stage takes a record twice without effect.
    if (again) again.shardSent = this.sendShard(again.shard);
    const handled = again ?? (await this.process(d));
    this.stored.set(d, handled);
    await this.sink(handled.findings, handled.deadLetters, d, handled.shardSent);
    if (handled.take) this.limits!.written(handled.take);
    this.stored.delete(d);
    this.o.onHandled?.(d);
    return handled;
  }

  /** Findings and dead letters to every sink, in order; a sink that rejects holds the delivery. */
  private async sink(
    findings: Finding[],
    dead: DeadLetter[],
    d: Delivery | undefined,
    shardSent?: Promise<void>,
  ): Promise<void> {
    await shardSent;
    if (dead.length) for (const s of this.o.deadLetterSinks ?? []) await s.write(dead, d);
    if (findings.length) for (const s of this.o.findingSinks ?? []) await s.write(findings);
  }

  /**
   * Sends shard records once every earlier send settled, so they reach the job stage in the order
   * the runner made them. A group's mark ("complete through step S") must come after its records
   * of those steps: a part of a step that comes after its step was judged is judged alone, and can
   * blame a link replay does not (detectors/sharded.test.ts). Sent as they are made, not once their
   * delivery is stored: deliveries in flight and the idle flush are stored in any order. Their
   * delivery is acknowledged only once the send resolved.
   */
  private sendShard(records: unknown[] | undefined): Promise<void> | undefined {
    const sink = this.o.shardSink;
    if (!records?.length || !sink) return undefined;
    const sent = this.shardSends.then(() =>
      retry(() => sink(records), { signal: this.abort.signal, jitter: true }),
    );
    // Also marks `sent` handled: its delivery awaits it only after the store write.
    this.shardSends = sent.catch(() => {});
    return sent;
  }

  private async process(d: Delivery): Promise<Handled> {
    if (this.shardRecords(d, false)) {
      const { out, take } = this.take();
      await this.write([], [], out);
      this.c.batches++;
      return { deadLetters: [], findings: out.findings, take };
    }
    this.runner.keyed(d.key);
    const good: RankwatchEvent[] = [];
    const goodLines: (string | undefined)[] = [];
    const bad: DeadLetter[] = [];
    const goodOffsets: number[] = [];
    const now = Date.now();
    const undecodable = d.undecodable ?? [];
    // Per bus message (Kafka): where each event and dead letter came from. The rows go in under
    // one token naming the delivery's offset range (topic/partition/first-last): a new owner
    // rebuilds the same ranges (stream/kafka.ts, boundaries), so a stored stretch is recognised
    // however the fetches fell; without messages, the engine hashes the content.
    const msgs = d.messages;
    const fits =
      msgs !== undefined &&
      msgs.length > 0 &&
      msgs.reduce((n, m) => n + m.events, 0) === d.events.length &&
      msgs.reduce((n, m) => n + m.undecodable, 0) === undecodable.length;
    const parts = fits
      ? msgs
      : [{ offset: d.offset, events: d.events.length, undecodable: undecodable.length }];
    const at = (offset: number) => (fits ? { topic: d.topic, partition: d.partition, offset } : {});
    // Raw lines are for the store's rows: without a store, no array of them per delivery.
    const lines = this.o.store ? d.lines : undefined;
    let i = 0;
    let u = 0;
    for (const m of parts) {
      this.reading(d, m.offset, false);
      for (let k = 0; k < m.undecodable; k++, u++)
        bad.push({
          ts: now,
          source: d.key,
          reason: undecodable[u].reason,
          raw: undecodable[u].raw,
          ...at(m.offset),
          ...(undecodable[u].line === undefined ? {} : { line: undecodable[u].line }),
        });
      for (let k = 0; k < m.events; k++, i++) {
        const value = d.events[i];
        // No result object per event: every event of every delivery passes here.
        const problem = eventProblem(value);
        if (problem === undefined) {
          const event = value as RankwatchEvent;
          good.push(event);
          if (event.ts > this.eventTime) this.eventTime = event.ts;
          if (lines) goodLines.push(lines[i]);
          if (fits) goodOffsets.push(m.offset);
          this.runner.push(event);
        } else {
          bad.push({
            ts: now,
            source: d.key,
            reason: problem,
            raw: d.lines?.[i] ?? JSON.stringify(value) ?? String(value),
            ...at(m.offset),
            ...(d.lineNumbers ? { line: d.lineNumbers[i] } : {}),
          });
        }
      }
    }
    this.deliveredAt = Date.now();
    const group: Group = {
      start: 0,
      end: good.length,
      ...(fits
        ? { token: `${d.topic ?? ''}/${d.partition}/${msgs[0].offset}-${msgs[msgs.length - 1].offset}` }
        : {}),
      ...(fits ? { offsets: goodOffsets, topic: d.topic, partition: d.partition } : {}),
    };
    const { out, take } = this.take();
    const shardSent = this.sendShard(out.shard);
    const dead = await this.write(good, bad, out, lines ? goodLines : undefined, d.key, [group]);
    this.c.batches++;
    return { deadLetters: dead, findings: out.findings, shard: out.shard, shardSent, take };
  }

  /**
   * Rebuilds detector state from the raw events the store kept for the last `windowMs` of event
   * time (oldest first, a minute of event time at a time), output dropped, the way `replay` does
   * for a delivery: after a crash, `rankwatch up` carries on where it stopped instead of opening
   * its findings again under new ids. Returns the events seen. Needs raw events (not --no-events).
   */
  async rebuild(store: Store, windowMs: number): Promise<number> {
    const last = await latestEventTs(store);
    if (last === undefined || windowMs <= 0) return 0;
    let seen = 0;
    for (let from = last - windowMs; from <= last; from += 60_000) {
      for (const line of await rawEventsBetween(store, from, Math.min(from + 60_000, last + 1))) {
        const v = parseEventLine(line);
        if (!v.ok) continue;
        this.runner.push(v.event);
        if (v.event.ts > this.eventTime) this.eventTime = v.event.ts;
        seen++;
      }
      this.runner.take();
    }
    return seen;
  }

  /**
   * Rebuilds detector state from a batch that was processed (and stored) before, e.g. by another
   * consumer that owned its partition: the detectors see its events, their output is dropped, so
   * a new owner goes on where the old one stopped without re-opening its findings.
   */
  replay(d: Delivery): void {
    this.partitionOf.set(d.key, d.partition);
    if (!this.shardRecords(d, true)) {
      this.runner.keyed(d.key);
      this.reading(d, d.offset, true);
      for (const value of d.events) {
        const v = validateEvent(value);
        if (v.ok) this.runner.push(v.event);
      }
    }
    // A job stage keeps what live events it released meanwhile (their output was never out).
    if (this.o.holds) this.o.holds.dropReplayed();
    else this.runner.take();
  }

  /** A job stage's delivery of shard records: handed over, true; anything else, false. */
  private shardRecords(d: Delivery, replayed: boolean): boolean {
    if (d.topic === undefined || d.topic !== this.o.shardRecordsTopic) return false;
    // Each message's records as read at its own offset: one delivery holds several messages, and
    // a record held by the job stage must hold back the commit from its message, not the last one.
    const msgs = d.messages;
    if (msgs?.length && msgs.reduce((n, m) => n + m.events, 0) === d.events.length) {
      let i = 0;
      for (const m of msgs) {
        this.reading(d, m.offset, replayed);
        this.o.onShardRecords?.(d.events.slice(i, i + m.events));
        i += m.events;
      }
    } else {
      this.reading(d, d.offset, replayed);
      this.o.onShardRecords?.(d.events);
    }
    // The bus goes idle, and event time moves on, from the records too: a job stage may read
    // nothing else (its sharded jobs' events come in them).
    this.deliveredAt = Date.now();
    const t = this.o.holds?.inputTime() ?? 0;
    if (t > this.eventTime) this.eventTime = t;
    return true;
  }

  /**
   * Partitions this process no longer owns (a rebalance gave them to another member): the jobs
   * delivered from them are let go without a word (DetectorRunner.forget), since their new owner
   * carries their incidents on. If one comes back, the transport replays it from the start.
   */
  forgetPartitions(partitions: readonly number[]): void {
    this.limits?.forget(partitions);
    for (const [key, p] of this.partitionOf) {
      if (!partitions.includes(p)) continue;
      this.runner.forget(key);
      this.partitionOf.delete(key);
    }
  }

  /**
   * Stores a batch; resolves with every dead letter it set aside. Counters move only once the
   * store holds the rows, so they equal the tables.
   */
  private async write(
    good: RankwatchEvent[],
    bad: DeadLetter[],
    out: DetectorOutput,
    lines?: (string | undefined)[],
    source = '',
    groups: Group[] = [{ start: 0, end: good.length }],
  ): Promise<DeadLetter[]> {
    let dead = bad;
    if (this.o.store) {
      try {
        await this.insert([
          ...this.eventBatches(good, lines, groups),
          ...deadLetterRows(bad),
          ...outputRows(out),
        ]);
      } catch (err) {
        if (!refusal(err) || this.abort.signal.aborted || good.length === 0) throw err;
        // The store refuses some rows themselves (not an outage: those are retried above): find
        // the events it refuses, set them aside with its reason, and store the rest, so one bad
        // event cannot hold its batch forever.
        const refused: DeadLetter[] = [];
        for (const g of groups)
          await this.storeOrSetAside(good, lines, { ...g, source }, g.start, g.end, refused);
        dead = [...bad, ...refused];
        await this.insert([...deadLetterRows(dead), ...outputRows(out)]);
      }
    }
    const refusedCount = dead.length - bad.length;
    this.c.events += good.length - refusedCount;
    this.c.dead_letters += dead.length;
    this.c.findings += out.findings.length;
    this.c.mfu_points += out.mfu.length;
    if (good.length) this.o.onEvents?.(good);
    return dead;
  }

  /** Raw events and steps, one insert per group (per bus message when there are several). */
  private eventBatches(
    events: RankwatchEvent[],
    lines: (string | undefined)[] | undefined,
    groups: Group[],
  ): InsertBatch[] {
    if (groups.length === 1 && groups[0].token === undefined) return this.rowsOf(events, lines, undefined);
    return groups.flatMap((g) =>
      g.end > g.start ? this.rowsOf(events.slice(g.start, g.end), lines?.slice(g.start, g.end), g.token) : [],
    );
  }

  private rowsOf(events: RankwatchEvent[], lines?: (string | undefined)[], token?: string): InsertBatch[] {
    const batches = eventRows(events, lines, this.o.storeEvents === false ? SPARSE_KINDS : undefined);
    return token === undefined ? batches : batches.map((b) => ({ ...b, token }));
  }

  /**
   * Halves a refused range of events [from, to) until each event the store refuses stands alone,
   * then sets it aside. Sub-ranges of a bus message get tokens naming the range, so the same
   * message refused again after a crash is split, and deduplicated, the same way.
   */
  private async storeOrSetAside(
    events: RankwatchEvent[],
    lines: (string | undefined)[] | undefined,
    g: Group & { source: string },
    from: number,
    to: number,
    refused: DeadLetter[],
  ): Promise<void> {
    if (to <= from) return;
    const whole = from === g.start && to === g.end;
    const token =
      g.token === undefined ? undefined : whole ? g.token : `${g.token}#${from - g.start}-${to - g.start}`;
    try {
      await this.insert(this.rowsOf(events.slice(from, to), lines?.slice(from, to), token));
    } catch (err) {
      if (!refusal(err) || this.abort.signal.aborted) throw err;
      if (to - from === 1) {
        refused.push({
          ts: Date.now(),
          source: g.source,
          reason: `the store refused it: ${(err as Error).message.slice(0, 500)}`,
          raw: lines?.[from] ?? JSON.stringify(events[from]),
          ...(g.offsets === undefined
            ? {}
            : { topic: g.topic, partition: g.partition, offset: g.offsets[from] }),
        });
        return;
      }
      const half = from + ((to - from) >> 1);
      await this.storeOrSetAside(events, lines, g, from, half, refused);
      await this.storeOrSetAside(events, lines, g, half, to, refused);
    }
  }

  /** Inserts, retrying an unavailable store with backoff for as long as it takes (or until stopped). */
  private async insert(batches: InsertBatch[]): Promise<void> {
    const store = this.o.store!;
    await retry(() => store.insert(batches), {
      attempts: Number.POSITIVE_INFINITY,
      signal: this.abort.signal,
      // Everything but a refusal of the rows is about the store (disk, permissions, network,
      // a statement it cannot run now, unknown): hold the batch and try again.
      retryIf: (err) =>
        !refusal(err) && !(err instanceof RankwatchError && err.code === 'RANKWATCH_ERR_STOPPED'),
      onRetry: (err, attempt) => {
        this.c.store_retries++;
        this.lastError = (err as Error)?.message ?? String(err);
        this.failingSince ??= Date.now();
        // The store is behind or away: stop fetching until it takes this batch.
        if (!this.paused) this.o.transport.pause?.();
        this.paused = true;
        if (this.stopping && Date.now() - this.failingSince >= this.grace()) this.abort.abort();
        this.o.onStoreRetry?.(err, attempt);
      },
    });
    if (this.paused) {
      this.paused = false;
      this.o.transport.resume?.();
    }
    if (this.failingSince !== undefined) this.o.onStoreRecovered?.();
    this.failingSince = undefined;
  }
}
