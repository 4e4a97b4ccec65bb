import { join, resolve } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Automation } from '../../actions/automation.js';
import { automationFrom, CORDON_FLAGS, CORDON_FLAGS_HELP } from '../../actions/cli-options.js';
import type { Alerting } from '../../alerts/alerting.js';
import { ALERT_FLAGS, ALERT_FLAGS_HELP, alertingFrom } from '../../alerts/cli-options.js';
import { buildApp } from '../../api/app.js';
import { type AuthToken, authTokens } from '../../api/auth.js';
import { RankwatchError } from '../../core/errors.js';
import { Health } from '../../core/health.js';
import { createLogger, type Logger, silentLogger } from '../../core/log.js';
import { Metrics } from '../../core/metrics.js';
import { buildPipeline } from '../../pipeline/build.js';
import type { Pipeline } from '../../pipeline/pipeline.js';
import { actionSink, alertSink, consoleSink, type FindingSink } from '../../pipeline/sinks.js';
import { deadLetterRows } from '../../store/rows.js';
import type { Store } from '../../store/store.js';
import { MemoryTransport } from '../../stream/memory.js';
import type { Publisher, Transport } from '../../stream/transport.js';
import { WalTransport } from '../../stream/wal.js';
import { type Command, num, parse } from '../args.js';
import { openStore, STORE_FLAGS, STORE_FLAGS_HELP } from '../store-options.js';

export interface UpOptions {
  host: string;
  port: number;
  /** The store to write to (opened, not yet migrated); the pipeline migrates it at start. */
  store: Store;
  token?: string;
  /** Scoped tokens from --auth FILE (api/auth.ts); `token` joins them as read-and-ingest. */
  tokens?: AuthToken[];
  /** Ingest requests per second per client (default 200; 0: no limit). */
  ingestRate?: number;
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

/** The embedded pipeline behind the HTTP API: ingest → in-process bus → detectors → chDB. */
export async function startUp(o: UpOptions): Promise<Up> {
  const { store } = o;
  // One partition: the log is acknowledged from its head, in delivery order.
  const bus = new MemoryTransport({ maxQueuedBatches: 64, partitions: 1 });
  const wal = o.walDir ? new WalTransport(bus, { dir: o.walDir }) : undefined;
  const transport = wal ?? bus;
  const log = o.logger ?? silentLogger();
  const health = new Health(log);
  health.ok('store');
  const pipeline = buildPipeline({
    transport,
    store,
    storeName: o.storeName,
    onEvents: o.automation?.onEvents,
    findingSinks: [
      ...(o.automation ? [actionSink(o.automation)] : []),
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
    );
  const app = await buildApp({
    publisher: wal ? logged(transport, health) : transport,
    store,
    auth: { ingestToken: o.token, tokens: o.tokens },
    ingestRatePerSecond: o.ingestRate,
    health: () => ({
      pipeline: pipeline.counters(),
      bus: transport.counters(),
      alerts: o.alerting?.stats(),
      actions: o.automation?.stats(),
    }),
    checks: health,
    metrics,
    automation: o.automation,
  });
  const address = await app.listen({ host: o.host, port: o.port });
  // Once listening: a port or folder that fails is one line, before any other output.
  log.info(pipeline.describe());
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      await app.close();
      try {
        await pipeline.stop(); // closes the sinks: the repair loop finishes, alerts flush
      } finally {
        await wal?.close();
        await store.close();
      }
    })());
  return { url: address, app, pipeline, store, health, close };
}

/** Ingest through the log, reporting a log that cannot be written (disk full, unwritable) as `wal`. */
function logged(transport: Transport, health: Health): Publisher {
  health.ok('wal');
  return {
    type: transport.type,
    async publish(batches) {
      try {
        await transport.publish(batches);
      } catch (err) {
        if (!(err instanceof RankwatchError && err.code === 'RANKWATCH_ERR_STOPPED'))
          health.fail('wal', `ingest answers 500, nothing accepted: ${(err as Error).message}`);
        throw err;
      }
      health.ok('wal');
    },
    stop: () => transport.stop(),
  };
}

export const up: Command = {
  name: 'up',
  usage: `rankwatch up [options]

Runs the embedded pipeline in one process: POST /v1/ingest takes batches of v1 events (JSON
lines, gzip accepted) from collectors and training hooks, the detectors run on them, events and
findings are stored (chDB by default, or a ClickHouse server), and each finding is printed as
it opens. GET /healthz shows counters. Stops cleanly (drains, writes, closes) on SIGINT or SIGTERM.

  --host ADDR      address to listen on (default 127.0.0.1; 0.0.0.0 to take other machines' collectors)
  --port N         port (default 7070; 0 picks a free one, printed at start)
  --token T        require "Authorization: Bearer T" on ingest and reads (default: $RANKWATCH_TOKEN, else none)
  --auth FILE      scoped tokens: {"tokens": [{"name", "token" | "sha256", "scopes": ["read", "ingest", "admin"]}]}
                   (default: $RANKWATCH_AUTH_FILE); with neither, every route is open
  --ingest-rate N  ingest requests per second per client (token and address) before 429 (default 200; 0: off)
  --rebuild-minutes N  at start, replay the last N minutes of stored events into the detectors
                   (output dropped) so open findings carry on after a restart (default 60; 0: off)
  --wal DIR        write-ahead log: ingest is answered 2xx only once its events are fsynced here,
                   and a restart replays what was not yet stored (default DATA/ingest-wal, DATA
                   being --data or ./data)
${ALERT_FLAGS_HELP}
${CORDON_FLAGS_HELP}
${STORE_FLAGS_HELP}`,
  async run(argv) {
    const { values } = parse(argv, {
      ...ALERT_FLAGS,
      ...CORDON_FLAGS,
      host: { type: 'string' },
      port: { type: 'string' },
      token: { type: 'string' },
      auth: { type: 'string' },
      'ingest-rate': { type: 'string' },
      wal: { type: 'string' },
      'rebuild-minutes': { type: 'string' },
      ...STORE_FLAGS,
    });
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const log = createLogger('rankwatch up');
    const token = values.token ?? process.env.RANKWATCH_TOKEN ?? undefined;
    const host = values.host ?? '127.0.0.1';
    const tokens = authTokens({ file: values.auth ?? process.env.RANKWATCH_AUTH_FILE ?? undefined });
    if (!token && tokens.length === 0 && host !== '127.0.0.1' && host !== 'localhost' && host !== '::1')
      log.warn(
        'listening beyond loopback without --token or --auth: anyone who can reach it can ingest and read',
      );
    const { store, where } = await openStore(values);
    const alerting = alertingFrom(
      values,
      process.env,
      (d) => void store.insert(deadLetterRows([d])).catch(() => {}),
    );
    const server = await startUp({
      host,
      port: num(values.port, 'port', 7070),
      store,
      token: token || undefined,
      tokens,
      ingestRate: num(values['ingest-rate'], 'ingest-rate', 200),
      walDir: resolve(values.wal ?? join(values.data ?? process.env.RANKWATCH_DATA ?? 'data', 'ingest-wal')),
      logger: log,
      rebuildMinutes: num(values['rebuild-minutes'], 'rebuild-minutes', 60),
      alerting,
      automation: automationFrom(values, store, (fs) => alerting?.onFindings(fs)),
      storeName: where,
      sinks: [consoleSink((line) => console.log(line))],
    });
    console.log(
      `rankwatch up: listening on ${server.url} (POST /v1/ingest, GET /v1/jobs, /v1/findings, /docs, /healthz, /metrics); storing in ${where}`,
    );
    const failed = await new Promise<unknown>((done) => {
      const stop = (sig: string) => {
        log.info(`${sig}: draining and closing`);
        server.close().then(() => done(undefined), done);
      };
      process.once('SIGINT', () => stop('SIGINT'));
      process.once('SIGTERM', () => stop('SIGTERM'));
    });
    const c = server.pipeline.counters();
    console.log(
      `rankwatch up: stopped after ${c.events} events, ${c.dead_letters} dead letters, ${c.findings} findings`,
    );
    if (failed) throw failed; // e.g. the store stayed down: what was not written is named there
    return 0;
  },
};
