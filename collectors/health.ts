/**
 * The collector's local HTTP port: GET /metrics (Prometheus text, one family per counter,
 * labelled by source or reason), GET /healthz (the counters as JSON), and POST /v1/ingest, the
 * same contract as `rankwatch up`'s, so training hooks on the node can send to the collector
 * over loopback and share its batching and disk spool.
 */
import { createServer, type Server } from 'node:http';
import type { Health } from '../core/health.js';
import { httpServerTimeouts, SERVER_TIMEOUTS, type ServerTimeouts } from '../core/server-timeouts.js';
import { ingestStatus, readIngestBody } from '../stream/ingest-body.js';
import { IngestBudget, type IngestLimits } from '../stream/ingest-limits.js';
import type { CollectorCounters } from './collector.js';

export function renderMetrics(c: CollectorCounters): string {
  const out: string[] = [];
  const family = (name: string, help: string, type: 'counter' | 'gauge', rows: [string, number][]) => {
    out.push(`# HELP rankwatch_collector_${name} ${help}`, `# TYPE rankwatch_collector_${name} ${type}`);
    for (const [labels, v] of rows) out.push(`rankwatch_collector_${name}${labels} ${v}`);
  };
  const labelled = (key: string, rec: Record<string, number>): [string, number][] =>
    Object.entries(rec).map(([k, v]) => [`{${key}="${k.replace(/["\\\n]/g, '_')}"}`, v]);
  /** Counters by source, then by `key` within it. */
  const bySource = (
    key: string,
    rec: Record<string, Record<string, number>> | undefined,
  ): [string, number][] =>
    Object.entries(rec ?? {}).flatMap(([src, inner]) =>
      labelled(key, inner).map(([l, v]): [string, number] => [
        `{source="${src.replace(/["\\\n]/g, '_')}",${l.slice(1)}`,
        v,
      ]),
    );
  family('events_read_total', 'events produced by sources', 'counter', [['', c.events_read]]);
  family('events_sent_total', 'events the publisher accepted (sent or spooled)', 'counter', [
    ['', c.events_sent],
  ]);
  family(
    'events_dropped_total',
    'events dropped, by reason',
    'counter',
    labelled('reason', c.dropped_by_reason),
  );
  family(
    'parse_errors_total',
    'input lines a source could not use',
    'counter',
    labelled('source', c.parse_errors),
  );
  family(
    'ignored_fields_total',
    'samples of fields a source does not use (e.g. DCGM_* metrics it does not read), by source and field',
    'counter',
    bySource('field', c.ignored_fields),
  );
  family(
    'records_dropped_total',
    'input records a source held and could not use (unmappable pid, outside any step…), by source and reason',
    'counter',
    bySource('reason', c.records_dropped),
  );
  family(
    'source_errors_total',
    'failures to reach or read an input',
    'counter',
    labelled('source', c.source_errors),
  );
  family('publish_errors_total', 'failed publishes', 'counter', [['', c.publish_errors]]);
  family('buffered_events', 'events waiting in memory', 'gauge', [['', c.buffered]]);
  for (const [k, v] of Object.entries(c)) {
    if (typeof v === 'number' && !(k in BASE)) family(k, k.replaceAll('_', ' '), 'gauge', [['', v]]);
  }
  return `${out.join('\n')}\n`;
}

const BASE = { events_read: 1, events_sent: 1, events_dropped: 1, publish_errors: 1, buffered: 1 };

export interface LocalServerDeps {
  counters: () => CollectorCounters;
  /**
   * Where events POSTed to /v1/ingest go; the 200 waits for it (with a spool: on disk). A
   * rejection answers 503, nothing accepted, and the sender keeps its events.
   */
  ingest: (events: unknown[]) => void | Promise<void>;
  /** Health checks: GET /healthz is 503 with the failing checks' reasons while one fails. */
  health?: Health;
  /** Who may POST: loopback peers only (default: the port carries no token), anyone, or no one. */
  ingestFrom?: 'loopback' | 'any' | 'off';
  /** Bounds of one POST (default: those of `rankwatch up`, stream/ingest-limits.ts). */
  ingestLimits?: Partial<IngestLimits>;
  /** What all POSTs being read or handed off may hold at once (default 64 MiB of JSON lines). */
  ingestBudget?: IngestBudget;
  /** How long a client may take (default SERVER_TIMEOUTS, as `rankwatch up`'s API). */
  timeouts?: Partial<ServerTimeouts>;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);

export async function startHealthServer(
  host: string,
  port: number,
  deps: LocalServerDeps,
): Promise<{ url: string; server: Server; close(): Promise<void> }> {
  const budget = deps.ingestBudget ?? new IngestBudget();
  const timeouts = { ...SERVER_TIMEOUTS, ...deps.timeouts };
  // A client that dribbles its headers or body (slowloris: the port takes no token) is cut off.
  const server: Server = createServer(httpServerTimeouts(timeouts), (req, res) => {
    if (req.method === 'POST' && req.url === '/v1/ingest') {
      const from = deps.ingestFrom ?? 'loopback';
      if (from === 'off' || (from === 'loopback' && !LOOPBACK.has(req.socket.remoteAddress ?? ''))) {
        const why = from === 'off' ? 'off' : 'for loopback peers only';
        res
          .writeHead(403)
          .end(
            JSON.stringify({ accepted: 0, rejected: 0, message: `ingest here is ${why} (health.ingest)` }),
          );
        return;
      }
      const json = (status: number, body: object, headers: Record<string, string> = {}) =>
        res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
      const declared = Number(req.headers['content-length']);
      // The same limits as `rankwatch up`'s ingest (stream/ingest-limits.ts), read as a stream.
      void readIngestBody(req, {
        limits: deps.ingestLimits,
        budget,
        declaredBytes: Number.isFinite(declared) ? declared : undefined,
      }).then((r) => {
        if (!r.ok)
          return json(
            r.status,
            { accepted: 0, rejected: 0, message: r.message, ...(r.code ? { code: r.code } : {}) },
            {
              ...(r.retryAfterS ? { 'retry-after': String(r.retryAfterS) } : {}),
              ...(r.close ? { connection: 'close' } : {}),
            },
          );
        const reply = {
          accepted: r.good.length,
          rejected: r.rejected,
          ...(r.rejected ? { errors: r.errors } : {}),
        };
        Promise.resolve()
          .then(() => (r.good.length ? deps.ingest(r.good) : undefined))
          .then(
            () => json(ingestStatus(r), reply),
            (err: Error) =>
              json(503, { accepted: 0, rejected: 0, message: `not accepted, send again: ${err.message}` }),
          )
          .finally(() => r.release());
      });
    } else if (req.url === '/metrics') {
      const checks = Object.entries(deps.health?.report().checks ?? {}).map(
        ([name, c]) => `rankwatch_collector_health_check_ok{check="${name}"} ${c.ok ? 1 : 0}`,
      );
      const health = checks.length
        ? `# HELP rankwatch_collector_health_check_ok health checks: 1 ok, 0 failing (reason on /healthz)\n# TYPE rankwatch_collector_health_check_ok gauge\n${checks.join('\n')}\n`
        : '';
      res
        .writeHead(200, { 'content-type': 'text/plain; version=0.0.4' })
        .end(renderMetrics(deps.counters()) + health);
    } else if (req.url === '/healthz') {
      const h = deps.health?.report();
      res
        .writeHead(h && !h.ok ? 503 : 200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ ok: h?.ok ?? true, ...(h ? { checks: h.checks } : {}), ...deps.counters() }));
    } else res.writeHead(404).end('GET /metrics, GET /healthz, POST /v1/ingest\n');
  });
  server.timeout = timeouts.idleMs;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const addr = server.address() as { port: number };
  return {
    url: `http://${host}:${addr.port}`,
    server,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}
