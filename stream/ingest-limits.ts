/**
 * What one ingest request, and all of them together, may hold in memory: `rankwatch up`'s and the
 * collector's POST /v1/ingest read a body as a stream and refuse it, before anything of it is
 * acknowledged, once it passes one of these. A request's events are all held until the write-ahead
 * log has them (a 2xx is all or the good lines, never a part cut off by a limit), so the limits
 * bound what a request holds and the budget bounds what all requests hold at once.
 */

export interface IngestLimits {
  /** Bytes a request may send (as sent, gzip or not); past it: 413. */
  maxBodyBytes: number;
  /** Bytes of JSON lines a request may hold once inflated; past it: 413. */
  maxInflatedBytes: number;
  /** Lines (events, good or bad) a request may hold; past it: 413. */
  maxEvents: number;
}

/** Collectors and the Python hook send 5,000 events a request; ten times that is refused. */
export const DEFAULT_INGEST_LIMITS: IngestLimits = {
  maxBodyBytes: 32 << 20,
  maxInflatedBytes: 16 << 20,
  maxEvents: 50_000,
};

/** Inflated bytes all requests being read or written to the log may hold at once; past it: 429. */
export const DEFAULT_INGEST_IN_FLIGHT_BYTES = 64 << 20;

/** Seconds a client told "busy" (429) waits: requests in flight finish in well under that. */
export const BUSY_RETRY_AFTER_S = 1;

/**
 * The inflated bytes all ingest requests of one server hold, and the most they may. A request
 * takes bytes as it reads them and gives them all back once it is answered; a take that would
 * pass the limit is refused (the request answers 429 and gives back what it took).
 */
export class IngestBudget {
  private held = 0;
  /** Requests refused whole: over a request's limits (413), or over this budget (429). */
  readonly refused = { too_large: 0, busy: 0 };

  constructor(readonly maxBytes: number = DEFAULT_INGEST_IN_FLIGHT_BYTES) {}

  take(bytes: number): boolean {
    if (this.held + bytes > this.maxBytes) return false;
    this.held += bytes;
    return true;
  }

  give(bytes: number): void {
    this.held = Math.max(0, this.held - bytes);
  }

  /** Bytes held now (a gauge on /metrics). */
  bytes(): number {
    return this.held;
  }
}

/** Bytes as a person reads them in a message: "16777216 bytes (16 MiB)". */
export function sizeText(bytes: number): string {
  return bytes % (1 << 20) === 0 ? `${bytes} bytes (${bytes >> 20} MiB)` : `${bytes} bytes`;
}
