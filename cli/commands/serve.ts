import { createLogger } from '../../core/log.js';
import { type Command, num, parse } from '../args.js';
import { reloadOnHangup } from '../hangup.js';
import { openStore, STORE_FLAGS, STORE_FLAGS_HELP } from '../store-options.js';

export const serve: Command = {
  name: 'serve',
  usage: `rankwatch serve [options]

Serves the read API (jobs, MFU, heatmaps, findings, nodes, cordon list; /openapi.json, /docs)
over a store that other processes write to: a ClickHouse server fed by \`rankwatch detect\`, or
a chDB folder no other process holds. Takes no events (collectors post to \`rankwatch up\` or Kafka).
Stops on SIGINT or SIGTERM; SIGHUP re-reads the --auth file (so does a change to it).

  --host ADDR      address to listen on (default 127.0.0.1)
  --port N         port (default 7071; 0 picks a free one, printed at start)
  --auth FILE      scoped tokens: {"tokens": [{"name", "token" | "sha256", "scopes": ["read", "admin"]}]}
                   [RANKWATCH_AUTH_FILE]; re-read on SIGHUP and when it changes
  --token T        one more token, with the read scope                  [RANKWATCH_TOKEN]
${STORE_FLAGS_HELP}`,
  async run(argv) {
    const { values } = parse(argv, {
      host: { type: 'string' },
      port: { type: 'string' },
      auth: { type: 'string' },
      token: { type: 'string' },
      ...STORE_FLAGS,
    });
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
    const authPath = values.auth ?? process.env.RANKWATCH_AUTH_FILE ?? undefined;
    const token = values.token ?? process.env.RANKWATCH_TOKEN ?? undefined;
    const auth = authPath ? new WatchedAuthFile(authPath, log) : undefined;
    const unhook = reloadOnHangup(auth, log);
    const host = values.host ?? '127.0.0.1';
    if (!token && !auth?.current().length && host !== '127.0.0.1' && host !== 'localhost' && host !== '::1')
      log.warn('listening beyond loopback without --auth or --token: anyone who can reach it can read');
    const { store, where } = await openStore(values, (m) => log.warn(m));
    try {
      await store.migrate();
    } catch (err) {
      await store.close();
      throw err;
    }
    const app = await buildApp({ store, auth: { tokens: auth?.current, ingestToken: token }, logger: log });
    const url = await app.listen({ host, port: num(values.port, 'port', 7071) });
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
