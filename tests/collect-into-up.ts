/**
 * The two ends of the collect integration tests: `rankwatch up` in this process on chDB, and the
 * built `rankwatch collect` (a subprocess, as a user runs it) posting to it.
 */
import { join } from 'node:path';
import { startUp, type Up } from '../api/up.js';
import { ChdbStore } from '../store/chdb.js';
import { type Running, startRankwatch } from './helpers.js';

/** The ingest token both ends share. */
const TOKEN = 'tok';

/** `rankwatch up` on 127.0.0.1 (a free port) over a chDB folder `data` in `dir`. */
export function upOnChdb(dir: string): Promise<Up> {
  return startUp({
    host: '127.0.0.1',
    port: 0,
    store: new ChdbStore({ path: join(dir, 'data') }),
    token: TOKEN,
  });
}

/** `rankwatch collect` posting to `up` as `host`, with the sources and options in `args`. */
export function collectInto(
  up: Up,
  host: string,
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): Running {
  return startRankwatch(['collect', '--bus', up.url, '--token', TOKEN, '--host', host, ...args], env);
}
