/**
 * The check an ingest body gets, shared by `rankwatch up`'s POST /v1/ingest and the collector's:
 * read as a stream (gunzipped when it starts with the gzip magic number), split into JSON lines,
 * each validated, every rejected line's number and reason kept (the first `maxReasons`). A body
 * past a limit (stream/ingest-limits.ts) is refused as soon as it passes it, with nothing of it
 * accepted; parsing gives the event loop back every few milliseconds, so other requests (and
 * /healthz) are answered while a large body is read.
 */
import type { Readable } from 'node:stream';
import { PassThrough } from 'node:stream';
import { StringDecoder } from 'node:string_decoder';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { createGunzip } from 'node:zlib';
import type { ErrorCode } from '../core/errors.js';
import type { RankwatchEvent } from '../schema/events.js';
import { validateEvent } from '../schema/validate.js';
import {
  BUSY_RETRY_AFTER_S,
  DEFAULT_INGEST_LIMITS,
  IngestBudget,
  type IngestLimits,
  sizeText,
} from './ingest-limits.js';

export interface CheckedBody {
  good: RankwatchEvent[];
  /** The text each good event arrived as, aligned with `good`: stored and journaled as sent, not encoded again. */
  lines: string[];
  errors: { line: number; reason: string }[];
  rejected: number;
  /** Every rejected line as sent, with its line number and reason: kept as dead letters. */
  rejects: { line: number; reason: string; raw: string }[];
}

/**
 * The status of a body that was read whole: 200 when any event was accepted (the reply counts the
 * rejected lines and lists the first ones), 400 only when none was.
 */
export function ingestStatus(b: Pick<CheckedBody, 'good' | 'rejected'>): 200 | 400 {
  return b.good.length === 0 && b.rejected > 0 ? 400 : 200;
}

/** Why a body was not taken at all; nothing of it was accepted. */
export interface Refusal {
  status: 400 | 413 | 429;
  message: string;
  code?: ErrorCode;
  /** Seconds after which sending it again can succeed (429). */
  retryAfterS?: number;
  /** The body was not read to its end: close the connection after the reply. */
  close?: boolean;
}

export type IngestRead = ({ ok: true; release(): void } & CheckedBody) | ({ ok: false } & Refusal);

export interface ReadOptions {
  limits?: Partial<IngestLimits>;
  /** Shared by every request of one server (429 past it); none: no bound across requests. */
  budget?: IngestBudget;
  /** Rejected lines listed (the count covers them all). */
  maxReasons?: number;
  /** The Content-Length the client declared: over the limit, refused before a byte is read. */
  declaredBytes?: number;
  /** Longest stretch of parsing between two turns of the event loop (default 8 ms). */
  sliceMs?: number;
}

const SLICE_MS = 8;

class RefusalError extends Error {
  constructor(readonly refusal: Refusal) {
    super(refusal.message);
  }
}

const tooLarge = (message: string, close = false): Refusal => ({
  status: 413,
  code: 'RANKWATCH_ERR_INGEST_TOO_LARGE',
  message: `${message}; nothing of it was accepted`,
  ...(close ? { close } : {}),
});

/** A body over the bytes a request may send (also fastify's own 413 wording). */
export const bodyTooLarge = (maxBodyBytes: number): Refusal =>
  tooLarge(
    `request body is over the ${maxBodyBytes} byte limit: gzip it or split it into smaller batches`,
    true,
  );

/**
 * Reads, checks and holds a body. `ok`: its events and their text, holding their bytes of the
 * budget until `release()` (call it once the reply is decided); otherwise why it was refused
 * (its bytes already given back). The request is read to its end in the background after a
 * refusal, bytes dropped as they come, so the client can read the reply; one that sends more than
 * `maxBodyBytes` is cut off.
 */
export async function readIngestBody(src: Readable, o: ReadOptions = {}): Promise<IngestRead> {
  const budget = o.budget ?? new IngestBudget(Number.POSITIVE_INFINITY);
  const limits = { ...DEFAULT_INGEST_LIMITS, ...o.limits };
  // A request may never need more than all of them together: it would be told to retry forever.
  limits.maxInflatedBytes = Math.min(limits.maxInflatedBytes, budget.maxBytes);
  const refuse = (r: Refusal): IngestRead => {
    if (r.status === 413) budget.refused.too_large++;
    if (r.status === 429) budget.refused.busy++;
    return { ok: false, ...r };
  };
  if ((o.declaredBytes ?? 0) > limits.maxBodyBytes) return refuse(bodyTooLarge(limits.maxBodyBytes));
  const raw = src.iterator({ destroyOnReturn: false });
  let rawBytes = 0;
  let head = Buffer.alloc(0);
  try {
    // Two bytes say whether it is gzip.
    while (head.length < 2) {
      const r = await raw.next();
      if (r.done) break;
      rawBytes += r.value.length;
      head = head.length ? Buffer.concat([head, r.value]) : r.value;
    }
  } catch (err) {
    return { ok: false, status: 400, message: `body: could not be read (${(err as Error).message})` };
  }
  const gzip = head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b;
  // 64 KiB pieces of inflated text: a quarter of the default's turns through the stream for the same body.
  const sink = gzip ? createGunzip({ chunkSize: 64 << 10 }) : new PassThrough();
  // Errors reach the reader through its iterator; this keeps a late one from being unhandled.
  sink.on('error', () => {});
  void feed(src, raw, sink, head, rawBytes, limits.maxBodyBytes);

  const checker = new BodyChecker(limits.maxEvents, o.maxReasons ?? 50, o.sliceMs ?? SLICE_MS);
  const decoder = new StringDecoder('utf8');
  let held = 0;
  const giveBack = () => {
    budget.give(held);
    held = 0;
  };
  try {
    for await (const out of sink as AsyncIterable<Buffer>) {
      held += out.length;
      if (held > limits.maxInflatedBytes)
        throw new RefusalError(
          tooLarge(
            `${gzip ? 'gzip body inflates' : 'body is'} past ${sizeText(limits.maxInflatedBytes)}, the most one request may hold: split it into smaller batches`,
          ),
        );
      if (!budget.take(out.length)) {
        held -= out.length;
        throw new RefusalError({
          status: 429,
          code: 'RANKWATCH_ERR_INGEST_BUSY',
          message: `ingest is busy: requests in flight hold the ${sizeText(budget.maxBytes)} this server takes at once; nothing of this one was accepted, send it again in ${BUSY_RETRY_AFTER_S} s`,
          retryAfterS: BUSY_RETRY_AFTER_S,
        });
      }
      await checker.push(decoder.write(out));
    }
    await checker.push(decoder.end());
    await checker.end();
  } catch (err) {
    giveBack();
    if (err instanceof RefusalError) return refuse(err.refusal);
    const code = (err as NodeJS.ErrnoException).code ?? '';
    const why = code.startsWith('Z_') ? `not valid gzip: ${(err as Error).message}` : (err as Error).message;
    return { ok: false, status: 400, message: `body: ${why}` };
  } finally {
    // Trailing bytes after a complete gzip stream must not keep the feeder waiting.
    sink.destroy();
  }
  return { ok: true, ...checker.result(), release: giveBack };
}

/**
 * Moves the request's bytes into `sink` as it takes them (its backpressure paces the socket).
 * Once `sink` is gone (the body was refused or is complete), the rest is read and dropped, so
 * the reply reaches a client that is still sending; past `maxBodyBytes` the request is cut off.
 */
async function feed(
  src: Readable,
  raw: AsyncIterator<Buffer>,
  sink: PassThrough | ReturnType<typeof createGunzip>,
  head: Buffer,
  rawBytes: number,
  maxBodyBytes: number,
): Promise<void> {
  let chunk = head;
  try {
    for (;;) {
      if (rawBytes > maxBodyBytes) {
        if (sink.destroyed) src.destroy();
        else sink.destroy(new RefusalError(bodyTooLarge(maxBodyBytes)));
        await raw.return?.();
        return;
      }
      if (chunk.length && !sink.destroyed && !sink.write(chunk)) await drainedOrGone(sink);
      const r = await raw.next();
      if (r.done) break;
      chunk = r.value;
      rawBytes += chunk.length;
    }
    if (!sink.destroyed) sink.end();
  } catch (err) {
    // The client went away or the socket failed: the reader says so (if it still reads).
    sink.destroy(err as Error);
  }
}

function drainedOrGone(s: PassThrough): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      s.off('drain', done);
      s.off('close', done);
      resolve();
    };
    s.on('drain', done);
    s.on('close', done);
  });
}

/**
 * JSON lines in, checked events out, across chunk boundaries. Line numbers count every line, blank
 * ones too; lines are trimmed (CRLF, stray tabs). Counts events (non-blank lines) against the
 * request's limit as it goes.
 */
class BodyChecker {
  private readonly good: RankwatchEvent[] = [];
  private readonly lines: string[] = [];
  private readonly errors: { line: number; reason: string }[] = [];
  private readonly rejects: { line: number; reason: string; raw: string }[] = [];
  private rejected = 0;
  private lineNo = 0;
  private events = 0;
  /** The start of a line that is not complete yet, in pieces (joined once its newline comes). */
  private carry: string[] = [];
  private sliceStart = performance.now();

  constructor(
    private readonly maxEvents: number,
    private readonly maxReasons: number,
    private readonly sliceMs: number,
  ) {}

  async push(text: string): Promise<void> {
    let from = 0;
    let nl = text.indexOf('\n');
    if (nl < 0) {
      if (text) this.carry.push(text);
      return;
    }
    if (this.carry.length) {
      this.carry.push(text.slice(0, nl));
      this.line(this.carry.join(''));
      this.carry = [];
      from = nl + 1;
      nl = text.indexOf('\n', from);
    }
    for (let n = 0; nl >= 0; n++) {
      this.line(text.slice(from, nl));
      from = nl + 1;
      nl = text.indexOf('\n', from);
      // performance.now() every 256 lines: its cost stays out of the per-line path.
      if ((n & 255) === 255 && performance.now() - this.sliceStart >= this.sliceMs) await this.yieldTurn();
    }
    if (from < text.length) this.carry.push(text.slice(from));
    if (performance.now() - this.sliceStart >= this.sliceMs) await this.yieldTurn();
  }

  async end(): Promise<void> {
    if (this.carry.length) this.line(this.carry.join(''));
    this.carry = [];
  }

  result(): CheckedBody {
    return {
      good: this.good,
      lines: this.lines,
      errors: this.errors,
      rejected: this.rejected,
      rejects: this.rejects,
    };
  }

  private async yieldTurn(): Promise<void> {
    await nextTurn();
    this.sliceStart = performance.now();
  }

  private line(text: string): void {
    this.lineNo++;
    const line = text.trim();
    if (!line) return;
    if (++this.events > this.maxEvents)
      throw new RefusalError(
        tooLarge(
          `body holds more than ${this.maxEvents} events, the most one request may send: split it into batches of at most ${this.maxEvents}`,
        ),
      );
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (err) {
      this.reject(`not valid JSON: ${(err as Error).message}`, line);
      return;
    }
    const v = validateEvent(value);
    if (v.ok) {
      this.good.push(v.event);
      this.lines.push(line);
    } else this.reject(v.reason, line);
  }

  /** Lines come in order, so the first `maxReasons` kept are the first rejected lines. */
  private reject(reason: string, raw: string): void {
    this.rejected++;
    this.rejects.push({ line: this.lineNo, reason, raw });
    if (this.errors.length < this.maxReasons) this.errors.push({ line: this.lineNo, reason });
  }
}
