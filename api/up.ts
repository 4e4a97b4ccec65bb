/**
 * The embedded server `rankwatch up` runs: HTTP ingest (through the write-ahead log) → in-process
 * bus → detectors → store, and the read API beside it. In a module of its own so the command's
 * `--help` does not load fastify and the engine, and so tests start it in-process.
 */
import type { FastifyInstance } from 'fastify';
import type { Automation } from '../actions/automation.js';
import type { RepairLoop } from '../actions/leader.js';
import { repairLoopMetrics } from '../actions/metrics.js';
import type { Alerting } from '../alerts/alerting.js';
import { RankwatchError } from '../core/errors.js';
import { Health } from '../core/health.js';
import { type Logger, silentLogger } from '../core/log.js';
import { Metrics } from '../core/metrics.js';
import { buildPipeline } from '../pipeline/build.js';
import type { Pipeline } from '../pipeline/pipeline.js';
import { actionSink, alertSink, type FindingSink } from '../pipeline/sinks.js';
import type { Store } from '../store/store.js';
import { IngestBudget } from '../stream/ingest-limits.js';
import { MemoryTransport } from '../stream/memory.js';
import type { Publisher, Transport } from '../stream/transport.js';
import { WalTransport } from '../stream/wal.js';
import { buildApp } from './app.js';
import type { AuthToken } from './auth.js';

export interface UpOptions {
  host: string;
  port: number;
  /** The store to write to (opened, not yet migrated); the pipeline migrates it at start. */
  store: Store;
  token?: string;
  /** Scoped tokens from --auth FILE (api/auth.ts), or the ones in force now (api/auth-file.ts); `token` joins them as read-and-ingest. */
  tokens?: AuthToken[] | (() => AuthToken[]);
  /** Ingest requests per second per client (default 200; 0: no limit). */
  ingestRate?: number;
  /** Events one ingest request may hold (default 50,000); past it: 413. */
  ingestMaxEvents?: number;
  /** Bytes of JSON lines one ingest request may hold once inflated (default 16 MiB); past it: 413. */
  ingestMaxBytes?: number;
  /** Bytes of JSON lines all ingest requests in flight may hold at once (default 64 MiB); past it: 429. */
  ingestInFlightBytes?: number;
  /**
   * Write-ahead log folder: ingest is answered only once its events are fsynced there, and what a
   * crashed process left is replayed at start before the port opens. Absent: no log (tests).
   */
  walDir?: string;
  /**
   * Minutes of stored event time replayed into the detectors at start (output dropped), so a
   * restart carries on with the findings it had (default 60; 0: start empty).
   */
  rebuildMinutes?: number;
  /** Where findings go besides the store, the repair loop and the alerts (e.g. the console). */
  sinks?: FindingSink[];
  /** Names the store in the topology line. */
  storeName?: string;
  /** Runtime log (default: silent). */
  logger?: Logger;
  /** Started alert sinks; they get every finding event and stop with the server. */
  alerting?: Alerting;
  /** The repair loop (node health, governor, cordon driver); gets findings and events. */
  automation?: Automation;
  /**
   * Runs `automation` durably behind the leader lease (actions/leader.ts): started before the
   * first event, so its stored state is back before the first decision; stopped after the pipeline.
   */
  repairLoop?: RepairLoop;
}

export interface Up {
  url: string;
  app: FastifyInstance;
  pipeline: Pipeline;
  store: Store;
  health: Health;
  /** Idempotent: stops taking requests, drains the pipeline, closes the store. */
  close(): Promise<void>;
}

/** Events the in-process bus holds between the log and the store: two requests' worth at most. */
const BUS_MAX_EVENTS = 100_000;

/** The embedded pipeline behind the HTTP API: ingest → in-process bus → detectors → chDB. */
export async function startUp(o: UpOptions): Promise<Up> {
  const { store } = o;
  // One partition: the log is acknowledged from its head, in delivery order. Bounded in events too,
  // so a slow store holds ingest replies (and then answers 429) instead of growing the queue.
  const bus = new MemoryTransport({ maxQueuedBatches: 64, maxQueuedEvents: BUS_MAX_EVENTS, partitions: 1 });
  const log = o.logger ?? silentLogger();
  const wal = o.walDir ? new WalTransport(bus, { dir: o.walDir, logger: log }) : undefined;
  const transport = wal ?? bus;
  const health = new Health(log);
  health.ok('store');
  // A loop fed from the store (shared with other processes) reads every process's output there.
  const inline = o.repairLoop?.fedFromStore ? undefined : o.automation;
  await o.repairLoop?.start();
  o.repairLoop?.watch(health);
  const pipeline = buildPipeline({
    transport,
    store,
    storeName: o.storeName,
    onEvents: inline?.onEvents,
    findingSinks: [
      ...(inline ? [actionSink(inline)] : []),
      ...(o.alerting ? [alertSink(o.alerting)] : []),
      ...(o.sinks ?? []),
    ],
    // One line when the store starts failing and one when it is back (Health logs transitions).
    onStoreRetry: (err) =>
      health.fail('store', `store write failing, batch held and retried: ${(err as Error).message}`),
    onStoreRecovered: () => health.ok('store'),
  });
  await pipeline.start();
  const rebuilt = await pipeline.rebuild(store, (o.rebuildMinutes ?? 60) * 60_000);
  if (rebuilt > 0)
    log.info(
      `rebuilt detector state from ${rebuilt} stored event(s) of the last ${o.rebuildMinutes ?? 60} min`,
    );
  if (wal) {
    const r = await wal.recover().catch(async (err) => {
      await pipeline.close();
      throw err;
    });
    if (r.batches > 0)
      log.info(
        `replaying ${r.events} event(s) in ${r.batches} batch(es) left in ${o.walDir} by the last run`,
      );
  }
  const ingest = new IngestBudget(o.ingestInFlightBytes);
  const metrics = new Metrics()
    .health(health)
    .counters(
      'rankwatch_pipeline',
      {
        events: 'valid events processed',
        dead_letters: 'events set aside with a reason (table dead_letters)',
        findings: 'findings emitted',
        store_retries: 'failed store writes retried',
      },
      () => ({ ...pipeline.counters() }),
    )
    .counters(
      'rankwatch_bus',
      {
        published_events: 'events accepted by ingest',
        redelivered_batches: 'batches delivered again after a failure',
      },
      () => ({ ...transport.counters() }),
    )
    .gauges(
      'rankwatch_wal',
      {
        bytes: 'bytes in the write-ahead log not yet stored',
        recovered_events: 'events replayed from the log at start',
      },
      () => {
        const c = wal?.counters();
        return { bytes: c?.wal_bytes, recovered_events: c?.wal_recovered_events };
      },
    )
    .gauges(
      'rankwatch_ingest',
      {
        in_flight_bytes: 'bytes of JSON lines held by ingest requests being read or logged',
        in_flight_limit_bytes:
          'the most they may hold at once (--ingest-memory-mb); past it ingest answers 429',
      },
      () => ({ in_flight_bytes: ingest.bytes(), in_flight_limit_bytes: ingest.maxBytes }),
    )
    .counters(
      'rankwatch_ingest',
      {
        refused_too_large:
          'ingest requests refused whole: over the events or bytes one request may send (413)',
        refused_busy: 'ingest requests refused whole: requests in flight held all they may (429)',
      },
      () => ({ refused_too_large: ingest.refused.too_large, refused_busy: ingest.refused.busy }),
    );
  if (o.repairLoop) repairLoopMetrics(metrics, o.repairLoop);
  const app = await buildApp({
    publisher: wal ? logged(transport, health) : transport,
    store,
    auth: { ingestToken: o.token, tokens: o.tokens },
    ingestRatePerSecond: o.ingestRate,
    maxIngestEvents: o.ingestMaxEvents,
    maxInflatedBytes: o.ingestMaxBytes,
    ingestBudget: ingest,
    health: () => ({
      pipeline: pipeline.counters(),
      bus: transport.counters(),
      alerts: o.alerting?.stats(),
      actions: o.automation?.stats(),
    }),
    checks: health,
    metrics,
    automation: o.automation,
    logger: o.logger,
  });
  const address = await app.listen({ host: o.host, port: o.port });
  // Once listening: a port or folder that fails is one line, before any other output.
  log.info(pipeline.describe());
  if (o.repairLoop) log.info(o.repairLoop.describe());
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      await app.close();
      try {
        await pipeline.stop(); // closes the sinks: the repair loop finishes, alerts flush
      } finally {
        await o.repairLoop?.stop(); // its state written, its lease given up
        await wal?.close();
        await store.close();
      }
    })());
  return { url: address, app, pipeline, store, health, close };
}

/**
 * Ingest through the log, reporting a log that cannot be written (disk full, unwritable) as `wal`
 * until a write succeeds again: the request is refused, nothing of it kept, and its sender retries.
 */
function logged(transport: Transport, health: Health): Publisher {
  health.ok('wal');
  return {
    type: transport.type,
    async publish(batches) {
      try {
        await transport.publish(batches);
      } catch (err) {
        if (!(err instanceof RankwatchError && err.code === 'RANKWATCH_ERR_STOPPED'))
          health.fail('wal', `ingest refused, nothing accepted (senders retry): ${(err as Error).message}`);
        throw err;
      }
      health.ok('wal');
    },
    stop: () => transport.stop(),
  };
}
