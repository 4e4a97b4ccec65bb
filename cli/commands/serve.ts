import { createLogger } from '../../core/log.js';
import { type Command, defineOptions, optionsHelp, parseOptions } from '../args.js';
import { reloadOnHangup } from '../hangup.js';
import { openStore, refuseMissingStore, STORE_OPTIONS } from '../store-options.js';

const SERVE_OPTIONS = defineOptions({
  host: { kind: 'string', arg: 'ADDR', default: '127.0.0.1', help: 'address to listen on' },
  port: {
    kind: 'number',
    integer: true,
    max: 65_535,
    default: 7071,
    help: 'port; 0 picks a free one, printed at start',
  },
  auth: {
    kind: 'file',
    env: 'RANKWATCH_AUTH_FILE',
    help: 'scoped tokens: {"tokens": [{"name", "token" | "sha256", "scopes": ["read", "admin"]}]}; re-read on SIGHUP and when it changes',
  },
  token: { kind: 'string', arg: 'T', env: 'RANKWATCH_TOKEN', help: 'one more token, with the read scope' },
});

const OPTIONS = defineOptions({ ...SERVE_OPTIONS, ...STORE_OPTIONS });

export const serve: Command = {
  name: 'serve',
  usage: `rankwatch serve [options]

Serves the read API (jobs, MFU, heatmaps, findings, nodes, cordon list; /openapi.json, /docs)
over a store that other processes write to: a ClickHouse server fed by \`rankwatch detect\`, or
a chDB folder no other process holds. Takes no events (collectors post to \`rankwatch up\` or Kafka).
Stops on SIGINT or SIGTERM; SIGHUP re-reads the --auth file (so does a change to it).

${optionsHelp(SERVE_OPTIONS)}
${optionsHelp(STORE_OPTIONS)}`,
  options: OPTIONS,
  async run(argv) {
    const { values } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    // Loaded once past --help, which then needs neither fastify nor the engine.
    const [{ buildApp }, { WatchedAuthFile }] = await Promise.all([
      import('../../api/app.js'),
      import('../../api/auth-file.js'),
    ]);
    const log = createLogger('rankwatch serve');
    const authPath = values.auth;
    const token = values.token;
    const auth = authPath ? new WatchedAuthFile(authPath, log) : undefined;
    const unhook = reloadOnHangup(auth, log);
    const host = values.host;
    if (!token && !auth?.current().length && host !== '127.0.0.1' && host !== 'localhost' && host !== '::1')
      log.warn('listening beyond loopback without --auth or --token: anyone who can reach it can read');
    refuseMissingStore(values); // it serves what is stored: a mistyped --data is refused, not created
    const { store, where } = await openStore(values, (m) => log.warn(m));
    try {
      await store.migrate();
    } catch (err) {
      await store.close();
      throw err;
    }
    const app = await buildApp({ store, auth: { tokens: auth?.current, ingestToken: token }, logger: log });
    const url = await app.listen({ host, port: values.port });
    console.log(`rankwatch serve: listening on ${url} (GET /v1/..., /openapi.json, /docs); reading ${where}`);
    await new Promise<void>((done) => {
      const stop = (sig: string) => {
        log.info(`${sig}: closing`);
        done();
      };
      process.once('SIGINT', () => stop('SIGINT'));
      process.once('SIGTERM', () => stop('SIGTERM'));
    });
    unhook();
    auth?.close();
    try {
      await app.close();
    } finally {
      await store.close();
    }
    return 0;
  },
};
