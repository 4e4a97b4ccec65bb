/**
 * The loop of sources that poll (an exporter, a port, a folder): run, wait, run again. A failing
 * run is reported through the source's deps and retried with growing waits; the recovery is logged
 * once. `stop()` waits for a run in flight, so nothing is emitted after it returns.
 */
import { backoffMs, type SourceDeps } from '../source.js';

export interface Repeat {
  start(): void;
  stop(): Promise<void>;
}

export interface RepeatOptions {
  /** Wait after a good run; `startedAt` (Date.now() when it began) lets a scrape keep its cadence. */
  waitMs(startedAt: number): number;
  /** Wait after the n-th failure in a row (default: backoffMs(n)). */
  backoffMs?(failures: number): number;
  /** Said once when a run succeeds after failures. */
  recovered?: string;
}

export function repeat(
  name: string,
  deps: SourceDeps,
  run: () => Promise<void>,
  opts: RepeatOptions,
): Repeat {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let failures = 0;
  let running: Promise<void> | undefined;
  const loop = () => {
    if (stopped) return;
    const startedAt = Date.now();
    running = run()
      .then(() => {
        if (failures > 0 && opts.recovered) deps.logger.info(`${name}: ${opts.recovered}`);
        failures = 0;
      })
      .catch((err) => {
        failures++;
        deps.sourceError(name, err);
      })
      .finally(() => {
        if (stopped) return;
        const wait = failures ? (opts.backoffMs ?? backoffMs)(failures) : opts.waitMs(startedAt);
        timer = setTimeout(loop, Math.max(0, wait));
      });
  };
  return {
    start: () => {
      timer = setTimeout(loop, 0);
    },
    stop: async () => {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
