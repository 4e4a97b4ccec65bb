import type { FastifyInstance } from 'fastify';
import type { Automation } from '../../actions/automation.js';
import { automationFrom, CORDON_FLAGS, CORDON_FLAGS_HELP } from '../../actions/cli-options.js';
import type { Alerting } from '../../alerts/alerting.js';
import { ALERT_FLAGS, ALERT_FLAGS_HELP, alertingFrom } from '../../alerts/cli-options.js';
import { buildApp } from '../../api/app.js';
import { Pipeline } from '../../pipeline/pipeline.js';
import type { Finding } from '../../schema/finding.js';
import { deadLetterRows } from '../../store/rows.js';
import type { Store } from '../../store/store.js';
import { MemoryTransport } from '../../stream/memory.js';
import { type Command, num, parse } from '../args.js';
import { openStore, STORE_FLAGS, STORE_FLAGS_HELP } from '../store-options.js';

export interface UpOptions {
  host: string;
  port: number;
  /** The store to write to (opened, not yet migrated); the pipeline migrates it at start. */
  store: Store;
  token?: string;
  onFindings?: (findings: Finding[]) => void;
  /** Started alert sinks; they get every finding event and stop with the server. */
  alerting?: Alerting;
  /** The repair loop (node health, governor, cordon driver); gets findings and events. */
  automation?: Automation;
  log?: (line: string) => void;
}

export interface Up {
  url: string;
  app: FastifyInstance;
  pipeline: Pipeline;
  store: Store;
  /** Idempotent: stops taking requests, drains the pipeline, closes the store. */
  close(): Promise<void>;
}

/** The embedded pipeline behind the HTTP API: ingest → in-process bus → detectors → chDB. */
export async function startUp(o: UpOptions): Promise<Up> {
  const { store } = o;
  const transport = new MemoryTransport({ maxQueuedBatches: 64 });
  const pipeline = new Pipeline({
    transport,
    store,
    onEvents: o.automation?.onEvents,
    onFindings: (fs) => {
      o.automation?.onFindings(fs);
      o.alerting?.onFindings(fs);
      o.onFindings?.(fs);
    },
    onStoreRetry: (err, attempt) =>
      o.log?.(`store write failed (attempt ${attempt}): ${(err as Error).message}`),
  });
  await pipeline.start();
  const app = await buildApp({
    publisher: transport,
    auth: { ingestToken: o.token },
    health: () => ({
      pipeline: pipeline.counters(),
      bus: transport.counters(),
      alerts: o.alerting?.stats(),
      actions: o.automation?.stats(),
    }),
  });
  const address = await app.listen({ host: o.host, port: o.port });
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      await app.close();
      try {
        await pipeline.stop();
        await o.automation?.idle();
        await o.alerting?.stop();
      } finally {
        await store.close();
      }
    })());
  return { url: address, app, pipeline, store, close };
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
  --token T        require "Authorization: Bearer T" on ingest (default: $RANKWATCH_TOKEN, else none)
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
      ...STORE_FLAGS,
    });
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const token = values.token ?? process.env.RANKWATCH_TOKEN ?? undefined;
    const host = values.host ?? '127.0.0.1';
    if (!token && host !== '127.0.0.1' && host !== 'localhost' && host !== '::1')
      console.error(
        'rankwatch up: warning: listening beyond loopback without --token: anyone who can reach it can ingest',
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
      alerting,
      automation: automationFrom(values, store, (fs) => alerting?.onFindings(fs)),
      log: (l) => console.error(`rankwatch up: ${l}`),
      onFindings: (fs) => {
        for (const f of fs) {
          if (f.state === 'update') continue;
          const where = `${f.host}${f.gpu !== undefined ? `/${f.gpu}` : ''}${f.rank !== undefined ? ` rank ${f.rank}` : ''}`;
          console.log(
            `[${new Date(f.ts).toISOString()}] ${f.state === 'open' ? 'FOUND   ' : 'RESOLVED'} ${f.type} ${f.job ?? ''} ${where}: ${f.summary}`,
          );
        }
      },
    });
    console.log(
      `rankwatch up: listening on ${server.url} (POST /v1/ingest, GET /healthz); storing in ${where}`,
    );
    const failed = await new Promise<unknown>((done) => {
      const stop = (sig: string) => {
        console.error(`rankwatch up: ${sig}: draining and closing`);
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
