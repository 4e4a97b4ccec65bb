/** Feeds lines to a collector's local ingest (as the Python hook does), paced over a duration. */
import { gzipSync } from 'node:zlib';
import { sleep } from './procs.js';

export interface FeedResult {
  accepted: number;
  rejected: number;
}

export interface Fault {
  /** Share of the feed after which it starts (0..1). */
  at: number;
  name: string;
  /**
   * Runs beside the feed; resolves when the fault is over and cleared, with a note (a string) for
   * the report when it did not do what it is for (e.g. no write met a full disk).
   */
  run: () => Promise<unknown>;
}

const named = (f: Fault, note: unknown) => (typeof note === 'string' ? `${f.name} (${note})` : f.name);

/**
 * Posts `lines` in chunks to `url()` (re-read each time: a restarted collector may move), spread
 * over `seconds`, starting each fault when its share of the feed has gone out. A chunk that gets no
 * answer (collector restarting) is posted again: the collector answers only for what it took.
 */
export async function feed(o: {
  lines: string[];
  url: () => string;
  seconds: number;
  chunk: number;
  faults: Fault[];
  log: (line: string) => void;
}): Promise<FeedResult & { faults: string[] }> {
  const res: FeedResult = { accepted: 0, rejected: 0 };
  const chunks = Math.ceil(o.lines.length / o.chunk);
  const pending = [...o.faults].sort((a, b) => a.at - b.at);
  const running: Promise<void>[] = [];
  const done: string[] = [];
  const started = Date.now();
  for (let i = 0; i < chunks; i++) {
    while (pending.length && pending[0].at <= i / chunks) {
      const f = pending.shift() as Fault;
      o.log(`fault: ${f.name}`);
      running.push(
        f.run().then(
          (note) => {
            done.push(named(f, note));
            o.log(`fault over: ${named(f, note)}`);
          },
          (err) => {
            done.push(`${f.name} (failed to inject: ${(err as Error).message})`);
            o.log(`fault failed: ${f.name}: ${(err as Error).message}`);
          },
        ),
      );
    }
    const body = gzipSync(`${o.lines.slice(i * o.chunk, (i + 1) * o.chunk).join('\n')}\n`);
    for (;;) {
      try {
        const r = await fetch(`${o.url()}/v1/ingest`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-ndjson', 'content-encoding': 'gzip' },
          body,
          signal: AbortSignal.timeout(30_000),
        });
        const reply = (await r.json()) as { accepted?: number; rejected?: number };
        if (r.status >= 500 || r.status === 429 || reply.accepted === undefined)
          throw new Error(`HTTP ${r.status}`);
        res.accepted += reply.accepted ?? 0;
        res.rejected += reply.rejected ?? 0;
        break;
      } catch {
        await sleep(250);
      }
    }
    const due = started + ((i + 1) / chunks) * o.seconds * 1000;
    if (due > Date.now()) await sleep(due - Date.now());
  }
  for (const f of pending) running.push(f.run().then((note) => void done.push(named(f, note))));
  await Promise.all(running);
  return { ...res, faults: done };
}

/** Feeds the job to a collector's local port over `seconds`, 500 lines a post, with the faults. */
export function feedCollector(o: {
  lines: string[];
  colPort: number;
  seconds: number;
  faults: Fault[];
  log: (line: string) => void;
}): Promise<FeedResult & { faults: string[] }> {
  return feed({ ...o, url: () => `http://127.0.0.1:${o.colPort}`, chunk: 500 });
}

/** The faults to report: what ran, and the disk faults when the machine could not inject them. */
export const faultsRun = (ran: string[], diskFaults: boolean): string[] =>
  diskFaults ? ran : [...ran, 'disk faults not run: mount is not permitted here'];
