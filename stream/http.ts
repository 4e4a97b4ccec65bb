/**
 * A Publisher that POSTs batches to `rankwatch up` (POST /v1/ingest) as gzip JSON lines, with a
 * bearer token when one is set. An endpoint that is down, overloaded (429) or failing (5xx)
 * raises a retriable RANKWATCH_ERR_TRANSPORT_UNAVAILABLE, so a SpoolingPublisher keeps the batch
 * on disk and replays it; a reply that counts rejected lines (200 when some were accepted, 400
 * when none was) means the server kept the good ones and set the bad ones aside, so the batch
 * counts as sent and the rejected lines are reported, never retried. A 413 halves the
 * request until it fits; an event over the limit on its own is refused alone (onRefused).
 */
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';
import { RankwatchError } from '../core/errors.js';
import { encodeLines } from './codec.js';
import type { Batch, Publisher } from './transport.js';

const gzipAsync = promisify(gzip);

export interface HttpPublisherConfig {
  /** Base URL of `rankwatch up` (http://host:port) or the full ingest URL. */
  url: string;
  token?: string;
  /** Per-request timeout (default 10 s). */
  timeoutMs?: number;
  /** Events per request at most (default 5000); larger publishes are split. */
  maxEventsPerRequest?: number;
  /** Told about lines the server rejected (with their reasons), e.g. to log and count them. */
  onRejected?: (rejected: number, errors: { line: number; reason: string }[]) => void;
  /** Told about an event the server refuses on its own (413: over its body limit); the rest go on. */
  onRefused?: (event: unknown, reason: string) => void;
}

export interface HttpPublisherCounters {
  requests: number;
  sent_events: number;
  rejected_events: number;
  /** Events refused one by one (each alone over the server's body limit). */
  refused_events: number;
  failed_requests: number;
  bytes_sent: number;
}

export class HttpPublisher implements Publisher {
  readonly type = 'http';
  private readonly endpoint: string;
  private stopped = false;
  private readonly c: HttpPublisherCounters = {
    requests: 0,
    sent_events: 0,
    rejected_events: 0,
    refused_events: 0,
    failed_requests: 0,
    bytes_sent: 0,
  };

  constructor(private readonly cfg: HttpPublisherConfig) {
    const u = new URL(cfg.url);
    if (u.protocol !== 'http:' && u.protocol !== 'https:')
      throw new RankwatchError('RANKWATCH_ERR_CONFIG', `bus URL ${cfg.url}: expected http:// or https://`);
    if (u.pathname === '/' || u.pathname === '') u.pathname = '/v1/ingest';
    this.endpoint = u.toString();
  }

  async publish(batches: Batch[]): Promise<void> {
    if (this.stopped)
      throw new RankwatchError('RANKWATCH_ERR_STOPPED', 'publish on a stopped http publisher');
    const events = batches.flatMap((b) => b.events);
    const max = this.cfg.maxEventsPerRequest ?? 5000;
    for (let i = 0; i < events.length; i += max) await this.post(events.slice(i, i + max));
  }

  async stop(): Promise<void> {
    this.stopped = true;
  }

  counters(): HttpPublisherCounters {
    return { ...this.c };
  }

  private async post(events: unknown[]): Promise<void> {
    const body = await gzipAsync(encodeLines(events));
    const headers: Record<string, string> = {
      'content-type': 'application/x-ndjson',
      'content-encoding': 'gzip',
    };
    if (this.cfg.token) headers.authorization = `Bearer ${this.cfg.token}`;
    this.c.requests++;
    let res: Response;
    try {
      res = await fetch(this.endpoint, {
        method: 'POST',
        headers,
        body,
        signal: AbortSignal.timeout(this.cfg.timeoutMs ?? 10_000),
      });
    } catch (err) {
      this.c.failed_requests++;
      const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
      throw new RankwatchError(
        'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE',
        `ingest ${this.endpoint} unreachable (${cause})`,
        {
          cause: err,
        },
      );
    }
    const text = await res.text().catch(() => '');
    // 200 with rejected lines (some accepted) or 400 (none): the server kept the good ones and set
    // the rest aside; the batch counts as sent and the rejected lines are reported, never retried.
    const reply = res.ok || res.status === 400 ? safeJson(text) : undefined;
    if (res.ok && !(Number(reply?.rejected) > 0)) {
      this.c.sent_events += events.length;
      this.c.bytes_sent += body.length;
      return;
    }
    if (res.ok || res.status === 400) {
      const rejected = Number(reply?.rejected ?? events.length);
      this.c.rejected_events += rejected;
      this.c.sent_events += Number(reply?.accepted ?? 0);
      this.c.bytes_sent += body.length;
      this.cfg.onRejected?.(rejected, Array.isArray(reply?.errors) ? reply.errors : []);
      return;
    }
    this.c.failed_requests++;
    if (res.status === 401 || res.status === 403)
      throw new RankwatchError(
        'RANKWATCH_ERR_UNAUTHORIZED',
        `ingest ${this.endpoint} refused the token (HTTP ${res.status})`,
      );
    if (res.status === 413 && events.length > 1) {
      // Too big for the server's body limit: halve until it fits.
      const half = Math.ceil(events.length / 2);
      await this.post(events.slice(0, half));
      await this.post(events.slice(half));
      return;
    }
    if (res.status === 413) {
      // One event alone over the limit: retrying cannot help, and it must not hold the others.
      this.c.refused_events++;
      this.cfg.onRefused?.(
        events[0],
        `ingest ${this.endpoint} refused an event of ${body.length} bytes gzipped (HTTP 413: over its body limit)`,
      );
      return;
    }
    if (res.status === 429 || res.status >= 500)
      throw new RankwatchError(
        'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE',
        `ingest ${this.endpoint} answered HTTP ${res.status}: ${text.slice(0, 200)}`,
      );
    throw new RankwatchError(
      'RANKWATCH_ERR_CONFIG',
      `ingest ${this.endpoint} answered HTTP ${res.status}: ${text.slice(0, 200)}`,
    );
  }
}

function safeJson(
  text: string,
): { accepted?: number; rejected?: number; errors?: { line: number; reason: string }[] } | undefined {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
