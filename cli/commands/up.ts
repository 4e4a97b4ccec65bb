import { join, resolve } from 'node:path';
import { CORDON_OPTIONS, repairLoopFrom } from '../../actions/cli-options.js';
import { ALERT_OPTIONS, alertingFrom } from '../../alerts/cli-options.js';
import { RankwatchError } from '../../core/errors.js';
import { createLogger } from '../../core/log.js';
import { consoleSink } from '../../pipeline/sinks.js';
import { deadLetterRows } from '../../store/rows.js';
import { DEFAULT_INGEST_IN_FLIGHT_BYTES, DEFAULT_INGEST_LIMITS } from '../../stream/ingest-limits.js';
import { type Command, defineOptions, optionName, optionsHelp, parseOptions } from '../args.js';
import { reloadOnHangup } from '../hangup.js';
import { HEAP_OPTIONS } from '../process-options.js';
import { openStore, STORE_OPTIONS } from '../store-options.js';

const UP_OPTIONS = defineOptions({
  host: {
    kind: 'string',
    arg: 'ADDR',
    default: '127.0.0.1',
    help: "address to listen on (0.0.0.0 to take other machines' collectors)",
  },
  port: {
    kind: 'number',
    integer: true,
    max: 65_535,
    default: 7070,
    help: 'port; 0 picks a free one, printed at start',
  },
  token: {
    kind: 'string',
    arg: 'T',
    env: 'RANKWATCH_TOKEN',
    defaultText: 'none',
    help: 'require "Authorization: Bearer T" on ingest and reads',
  },
  auth: {
    kind: 'file',
    env: 'RANKWATCH_AUTH_FILE',
    help: 'scoped tokens: {"tokens": [{"name", "token" | "sha256", "scopes": ["read", "ingest", "admin"]}]}; with neither --auth nor --token, every route is open. Re-read on SIGHUP and when it changes; a bad file keeps the tokens in force',
  },
  'ingest-rate': {
    kind: 'number',
    env: 'RANKWATCH_INGEST_RATE',
    default: 200,
    help: 'ingest requests per second per client (token and address) before 429; 0: off',
  },
  'ingest-max-events': {
    kind: 'number',
    integer: true,
    min: 1,
    env: 'RANKWATCH_INGEST_MAX_EVENTS',
    default: DEFAULT_INGEST_LIMITS.maxEvents,
    help: 'events one ingest request may send before 413, nothing of it taken',
  },
  'ingest-max-mb': {
    kind: 'number',
    exclusiveMin: true,
    env: 'RANKWATCH_INGEST_MAX_MB',
    default: DEFAULT_INGEST_LIMITS.maxInflatedBytes / 2 ** 20,
    help: 'MiB of JSON lines one ingest request may hold once gunzipped before 413',
  },
  'ingest-memory-mb': {
    kind: 'number',
    exclusiveMin: true,
    env: 'RANKWATCH_INGEST_MEMORY_MB',
    defaultText: `${DEFAULT_INGEST_IN_FLIGHT_BYTES / 2 ** 20}, or --ingest-max-mb when that is more`,
    help: 'MiB of JSON lines all ingest requests being read at once may hold before 429 with Retry-After; at least --ingest-max-mb',
  },
  'rebuild-minutes': {
    kind: 'number',
    default: 60,
    help: 'at start, replay the last N minutes of stored events into the detectors (output dropped) so open findings carry on after a restart; 0: off',
  },
  wal: {
    kind: 'file',
    arg: 'DIR',
    defaultText: 'DATA/ingest-wal, DATA being --data',
    help: 'write-ahead log: ingest is answered 2xx only once its events are fsynced here, and a restart replays what was not yet stored',
  },
});

const OPTIONS = defineOptions({ ...UP_OPTIONS, ...ALERT_OPTIONS, ...CORDON_OPTIONS, ...STORE_OPTIONS });

export const up: Command = {
  name: 'up',
  usage: `rankwatch up [options]

Runs the embedded pipeline in one process: POST /v1/ingest takes batches of v1 events (JSON
lines, gzip accepted) from collectors and training hooks, the detectors run on them, events and
findings are stored (chDB by default, or a ClickHouse server), and each finding is printed as
it opens. GET /healthz shows counters. Stops cleanly (drains, writes, closes) on SIGINT or SIGTERM;
SIGHUP re-reads the --auth file (so does a change to it).

${optionsHelp(UP_OPTIONS)}
${optionsHelp(ALERT_OPTIONS)}
${optionsHelp(CORDON_OPTIONS)}
${optionsHelp(HEAP_OPTIONS)}
${optionsHelp(STORE_OPTIONS)}`,
  options: OPTIONS,
  async run(argv) {
    const { values } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const [{ startUp }, { WatchedAuthFile }] = await Promise.all([
      import('../../api/up.js'),
      import('../../api/auth-file.js'),
    ]);
    const log = createLogger('rankwatch up');
    const token = values.token;
    const host = values.host;
    const authPath = values.auth;
    // Re-read on SIGHUP and on change, from here on: a signal during the start does not stop it.
    const auth = authPath ? new WatchedAuthFile(authPath, log) : undefined;
    const unhook = reloadOnHangup(auth, log);
    const tokens = auth?.current ?? [];
    if (!token && !auth?.current().length && host !== '127.0.0.1' && host !== 'localhost' && host !== '::1')
      log.warn(
        'listening beyond loopback without --token or --auth: anyone who can reach it can ingest and read',
      );
    const ingestMaxMb = values['ingest-max-mb'];
    const ingestMemoryMb =
      values['ingest-memory-mb'] ?? Math.max(DEFAULT_INGEST_IN_FLIGHT_BYTES / 2 ** 20, ingestMaxMb);
    if (ingestMemoryMb < ingestMaxMb)
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        `${optionName('ingest-memory-mb', OPTIONS['ingest-memory-mb'])} ${ingestMemoryMb} is below ${optionName('ingest-max-mb', OPTIONS['ingest-max-mb'])} ${ingestMaxMb}: a request that large could never be taken; raise the first or lower the second`,
      );
    const { store, where } = await openStore(values, (m) => log.warn(m));
    const alerting = alertingFrom(values, (d) => void store.insert(deadLetterRows([d])).catch(() => {}));
    const console_ = consoleSink((line) => console.log(line));
    // Durable, behind the leader lease; on a ClickHouse server other processes may share, fed from it.
    // What the loop resolves itself (an Xid verified after repair) is a RESOLVED line like any other.
    const repairLoop = repairLoopFrom(values, store, {
      logger: log,
      publish: (fs) => {
        alerting?.onFindings(fs);
        void console_.write(fs);
      },
      shared: store.type !== 'chdb',
    });
    const server = await startUp({
      host,
      port: values.port,
      store,
      token: token || undefined,
      tokens,
      ingestRate: values['ingest-rate'],
      ingestMaxEvents: values['ingest-max-events'],
      ingestMaxBytes: Math.floor(ingestMaxMb * 2 ** 20),
      ingestInFlightBytes: Math.floor(ingestMemoryMb * 2 ** 20),
      walDir: resolve(values.wal ?? join(values.data, 'ingest-wal')),
      logger: log,
      rebuildMinutes: values['rebuild-minutes'],
      alerting,
      automation: repairLoop.automation,
      repairLoop,
      storeName: where,
      sinks: [console_],
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
