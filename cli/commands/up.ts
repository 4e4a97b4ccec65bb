import { join, resolve } from 'node:path';
import { CORDON_FLAGS, CORDON_FLAGS_HELP, repairLoopFrom } from '../../actions/cli-options.js';
import { ALERT_FLAGS, ALERT_FLAGS_HELP, alertingFrom } from '../../alerts/cli-options.js';
import { RankwatchError } from '../../core/errors.js';
import { HEAP_HELP } from '../../core/heap.js';
import { createLogger } from '../../core/log.js';
import { consoleSink } from '../../pipeline/sinks.js';
import { deadLetterRows } from '../../store/rows.js';
import { type Command, num, parse } from '../args.js';
import { reloadOnHangup } from '../hangup.js';
import { openStore, STORE_FLAGS, STORE_FLAGS_HELP } from '../store-options.js';

export const up: Command = {
  name: 'up',
  usage: `rankwatch up [options]

Runs the embedded pipeline in one process: POST /v1/ingest takes batches of v1 events (JSON
lines, gzip accepted) from collectors and training hooks, the detectors run on them, events and
findings are stored (chDB by default, or a ClickHouse server), and each finding is printed as
it opens. GET /healthz shows counters. Stops cleanly (drains, writes, closes) on SIGINT or SIGTERM;
SIGHUP re-reads the --auth file (so does a change to it).

  --host ADDR      address to listen on (default 127.0.0.1; 0.0.0.0 to take other machines' collectors)
  --port N         port (default 7070; 0 picks a free one, printed at start)
  --token T        require "Authorization: Bearer T" on ingest and reads (default: $RANKWATCH_TOKEN, else none)
  --auth FILE      scoped tokens: {"tokens": [{"name", "token" | "sha256", "scopes": ["read", "ingest", "admin"]}]}
                   (default: $RANKWATCH_AUTH_FILE); with neither, every route is open. Re-read on
                   SIGHUP and when it changes; a bad file keeps the tokens in force
  --ingest-rate N  ingest requests per second per client (token and address) before 429 (default 200; 0: off)
  --ingest-max-events N  events one ingest request may send before 413, nothing of it taken (default 50000)
  --ingest-max-mb N  MiB of JSON lines one ingest request may hold once gunzipped before 413 (default 16)
  --ingest-memory-mb N  MiB of JSON lines all ingest requests being read at once may hold before 429
                   with Retry-After (default 64; at least --ingest-max-mb)
  --rebuild-minutes N  at start, replay the last N minutes of stored events into the detectors
                   (output dropped) so open findings carry on after a restart (default 60; 0: off)
  --wal DIR        write-ahead log: ingest is answered 2xx only once its events are fsynced here,
                   and a restart replays what was not yet stored (default DATA/ingest-wal, DATA
                   being --data or ./data)
${ALERT_FLAGS_HELP}
${CORDON_FLAGS_HELP}
${HEAP_HELP}
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
      'ingest-max-events': { type: 'string' },
      'ingest-max-mb': { type: 'string' },
      'ingest-memory-mb': { type: 'string' },
      wal: { type: 'string' },
      'rebuild-minutes': { type: 'string' },
      ...STORE_FLAGS,
    });
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const [{ startUp }, { WatchedAuthFile }] = await Promise.all([
      import('../../api/up.js'),
      import('../../api/auth-file.js'),
    ]);
    const log = createLogger('rankwatch up');
    const token = values.token ?? process.env.RANKWATCH_TOKEN ?? undefined;
    const host = values.host ?? '127.0.0.1';
    const authPath = values.auth ?? process.env.RANKWATCH_AUTH_FILE ?? undefined;
    // Re-read on SIGHUP and on change, from here on: a signal during the start does not stop it.
    const auth = authPath ? new WatchedAuthFile(authPath, log) : undefined;
    const unhook = reloadOnHangup(auth, log);
    const tokens = auth?.current ?? [];
    if (!token && !auth?.current().length && host !== '127.0.0.1' && host !== 'localhost' && host !== '::1')
      log.warn(
        'listening beyond loopback without --token or --auth: anyone who can reach it can ingest and read',
      );
    const ingestMaxMb = num(values['ingest-max-mb'], 'ingest-max-mb', 16, { min: 0, exclusiveMin: true });
    const ingestMemoryMb = num(values['ingest-memory-mb'], 'ingest-memory-mb', Math.max(64, ingestMaxMb));
    if (ingestMemoryMb < ingestMaxMb)
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        `--ingest-memory-mb ${ingestMemoryMb} is below --ingest-max-mb ${ingestMaxMb}: a request that large could never be taken; raise the first or lower the second`,
      );
    const ingestMaxEvents = num(values['ingest-max-events'], 'ingest-max-events', 50_000, {
      min: 1,
      integer: true,
    });
    const { store, where } = await openStore(values, (m) => log.warn(m));
    const alerting = alertingFrom(
      values,
      process.env,
      (d) => void store.insert(deadLetterRows([d])).catch(() => {}),
    );
    // Durable, behind the leader lease; on a ClickHouse server other processes may share, fed from it.
    const repairLoop = repairLoopFrom(values, store, {
      logger: log,
      publish: (fs) => alerting?.onFindings(fs),
      shared: store.type !== 'chdb',
    });
    const server = await startUp({
      host,
      port: num(values.port, 'port', 7070),
      store,
      token: token || undefined,
      tokens,
      ingestRate: num(values['ingest-rate'], 'ingest-rate', 200),
      ingestMaxEvents,
      ingestMaxBytes: Math.floor(ingestMaxMb * 2 ** 20),
      ingestInFlightBytes: Math.floor(ingestMemoryMb * 2 ** 20),
      walDir: resolve(values.wal ?? join(values.data ?? process.env.RANKWATCH_DATA ?? 'data', 'ingest-wal')),
      logger: log,
      rebuildMinutes: num(values['rebuild-minutes'], 'rebuild-minutes', 60),
      alerting,
      automation: repairLoop.automation,
      repairLoop,
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
    unhook();
    auth?.close();
    const c = server.pipeline.counters();
    console.log(
      `rankwatch up: stopped after ${c.events} events, ${c.dead_letters} dead letters, ${c.findings} findings`,
    );
    if (failed) throw failed; // e.g. the store stayed down: what was not written is named there
    return 0;
  },
};
