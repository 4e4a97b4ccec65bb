/**
 * Where `jobs`, `report` and `findings` read from: a running API (`--api URL --token T`), or the
 * store itself (`--data DIR`, `--clickhouse-url URL`). Both answer through the same read API: over
 * the store, the app is built in-process and asked with inject(), so the figures are the same
 * whichever way a person reads them.
 */
import { RankwatchError } from '../core/errors.js';
import type { Store } from '../store/store.js';
import { defineOptions, type OptionValues, optionsHelp } from './args.js';
import { openStore, refuseMissingStore, STORE_OPTIONS } from './store-options.js';

const API_OPTIONS = defineOptions({
  json: { kind: 'boolean', help: 'print JSON (for scripts) instead of tables' },
  api: {
    kind: 'url',
    env: 'RANKWATCH_API',
    help: 'read from a running rankwatch up/serve, e.g. http://127.0.0.1:7070',
  },
  token: { kind: 'string', arg: 'T', env: 'RANKWATCH_TOKEN', help: 'bearer token for --api (read scope)' },
});

export const SOURCE_OPTIONS = defineOptions({ ...API_OPTIONS, ...STORE_OPTIONS });

export type SourceValues = OptionValues<typeof SOURCE_OPTIONS>;

export const SOURCE_OPTIONS_HELP = `${optionsHelp(API_OPTIONS)}
  or read the store directly (not while rankwatch up holds the same chDB folder):
${optionsHelp(STORE_OPTIONS)}`;

export interface ReadSource {
  /** GET of an API path (with query string); the JSON reply, or a RankwatchError saying what failed. */
  get<T = unknown>(path: string): Promise<T>;
  where: string;
  close(): Promise<void>;
}

function failure(status: number, message: string, what: string): RankwatchError {
  if (status === 404) return new RankwatchError('RANKWATCH_ERR_NOT_FOUND', message);
  if (status === 401 || status === 403) return new RankwatchError('RANKWATCH_ERR_UNAUTHORIZED', message);
  if (status === 503) return new RankwatchError('RANKWATCH_ERR_STORE_UNAVAILABLE', message);
  if (status === 400) return new RankwatchError('RANKWATCH_ERR_USAGE', message);
  return new RankwatchError('RANKWATCH_ERR_API_UNAVAILABLE', `${what}: HTTP ${status}: ${message}`);
}

export async function openSource(values: SourceValues): Promise<ReadSource> {
  const api = values.api;
  if (api) {
    const base = new URL(api);
    const token = values.token;
    return {
      where: base.origin,
      close: async () => {},
      async get<T>(path: string) {
        const url = new URL(path, base);
        let res: Response;
        try {
          res = await fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} });
        } catch (err) {
          throw new RankwatchError(
            'RANKWATCH_ERR_API_UNAVAILABLE',
            `cannot reach ${base.origin}: ${(err as Error).cause ?? (err as Error).message}`,
          );
        }
        const body = (await res.json().catch(() => ({}))) as { message?: string };
        if (!res.ok) throw failure(res.status, body.message ?? res.statusText, `GET ${url.pathname}`);
        return body as T;
      },
    };
  }
  const folder = refuseMissingStore(values);
  const { store, where } = await openStore(values).catch((err: unknown) => {
    // chDB lets one process hold a data folder: a running `rankwatch up` answers through its API.
    if (/lock|already running|Failed to create connection/i.test(String((err as Error).message)))
      throw new RankwatchError(
        'RANKWATCH_ERR_DATA_IN_USE',
        `the chDB folder ${folder} is held by another process (rankwatch up?): read through its API with --api URL --token T, --data`,
        { cause: err },
      );
    throw err;
  });
  try {
    await store.migrate();
  } catch (err) {
    await store.close();
    throw err;
  }
  const source = await sourceOverStore(store, where);
  return {
    ...source,
    async close() {
      await source.close();
      await store.close();
    },
  };
}

/** The read API over a store that is already open (and stays open: closing closes only the app). */
export async function sourceOverStore(store: Store, where: string): Promise<ReadSource> {
  // Loaded here, not at the top: `--api` reads, `replay` and every `--help` start without fastify.
  const { buildApp } = await import('../api/app.js');
  const app = await buildApp({ store });
  return {
    where,
    close: () => app.close(),
    async get<T>(path: string) {
      const res = await app.inject({ method: 'GET', url: path });
      const body = res.json() as { message?: string };
      if (res.statusCode >= 400) throw failure(res.statusCode, body.message ?? '', `GET ${path}`);
      return body as T;
    },
  };
}

/** Runs `fn` with the source open, closing it whatever happens. */
export async function withSource<T>(values: SourceValues, fn: (s: ReadSource) => Promise<T>): Promise<T> {
  const s = await openSource(values);
  try {
    return await fn(s);
  } finally {
    await s.close();
  }
}
