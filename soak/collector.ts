/** The soak's collector process, and what the harness reads from its /healthz. */
import { answering, getJson, Proc, sleep } from './procs.js';

/** `rankwatch collect` sending to `bus` with a spool and its health port, once it answers there. */
export async function startCollector(
  bus: string,
  spool: string,
  colPort: number,
  extra: string[] = [],
  env?: NodeJS.ProcessEnv,
): Promise<Proc> {
  const col = Proc.cli(
    'collect',
    [
      'collect',
      '--bus',
      bus,
      '--spool',
      spool,
      '--health-port',
      String(colPort),
      '--flush-ms',
      '200',
      '--host',
      'soak-collector',
      ...extra,
    ],
    env,
  );
  try {
    await answering(`http://127.0.0.1:${colPort}/healthz`);
  } catch (err) {
    await col.stop('SIGKILL').catch(() => {});
    throw err;
  }
  return col;
}

/** SIGTERM to each, in order; an exit other than 0 is logged with the end of its output. */
export async function stopEach(procs: (Proc | undefined)[], log: (l: string) => void): Promise<void> {
  for (const d of procs) {
    const code = await d?.stop('SIGTERM');
    if (code !== 0) log(`${d?.name} exited with ${code}:\n${d?.log().slice(-2000)}`);
  }
}

/** What a collector dropped: events the bus refused on their own, and any other reason by name. */
export interface CollectorDrops {
  refusedByBus: number;
  other: Record<string, number>;
}

/** The collector's drops as its /healthz reports them, added to `into` (one per collector run). */
export async function collectorDrops(port: number, into: CollectorDrops): Promise<void> {
  const h = await getJson(`http://127.0.0.1:${port}/healthz`).catch(() => undefined);
  const by = (h?.body.dropped_by_reason ?? {}) as Record<string, number>;
  for (const [reason, n] of Object.entries(by)) {
    if (reason === 'refused_by_bus') into.refusedByBus += n;
    else into.other[reason] = (into.other[reason] ?? 0) + n;
  }
}

/**
 * Waits until the collector holds nothing (buffer empty, spool replayed) and the consumer side's
 * counters have not moved for 3 s: all that was accepted has been delivered and processed.
 */
export async function quiet(colPort: number, sinkHealthUrl: string, ms = 120_000): Promise<void> {
  const end = Date.now() + ms;
  let last = '';
  let stableSince = Date.now();
  while (Date.now() < end) {
    const col = await getJson(`http://127.0.0.1:${colPort}/healthz`).catch(() => undefined);
    const sink = await getJson(sinkHealthUrl).catch(() => undefined);
    const c = (col?.body ?? {}) as Record<string, number>;
    // Nothing in memory, nothing left in the spool, and the collector's own health says delivered.
    const idle = c.buffered === 0 && (c.spool_bytes ?? 0) === 0 && col?.status === 200;
    const now = JSON.stringify([c.events_sent, c.buffered, c.replayed_batches, counts(sink?.body)]);
    if (now !== last) {
      last = now;
      stableSince = Date.now();
    } else if (idle && Date.now() - stableSince > 3_000) return;
    await sleep(500);
  }
  throw new Error('soak: the collector and its sink did not settle within 2 minutes');
}

/** The figures of a health reply that move only when work is done (not clocks, uptimes, ages). */
function counts(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(counts);
  if (v === null || typeof v !== 'object') return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v))
    if (!/uptime|since|time|_at$|age|lag|latency|rss|heap|memory/i.test(k)) out[k] = counts(x);
  return out;
}
