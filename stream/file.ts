/**
 * A recorded input as a bus: the JSON lines of a file (or stdin; plain or gzip) delivered in
 * order, a chunk of lines per delivery, each delivery awaited before the next is read, so the
 * pipeline's pace is the reading pace. Lines that are not JSON come with their line number in
 * `undecodable`; every event carries its line number too, so what is set aside can be found in the
 * file. `replay` reads through this, with the same pipeline `up` and `detect` run.
 *
 * Several files are read together, merged by event time (`ts`; each file in its own time order,
 * ties in the order the files were given): a file of the hooks' step events and a collector's file
 * of collectives reach the detectors interleaved as they were live, not one file after the other
 * (all steps first: every step judged before any of its collectives came). Their line numbers are
 * each file's own.
 */
import { statSync } from 'node:fs';
import { RankwatchError } from '../core/errors.js';
import { type LineChunk, mayBePadded, readLineChunks } from './lines.js';
import { learn, scanLine } from './scan.js';
import {
  type Delivery,
  type DeliveryHandler,
  type Transport,
  type TransportCounters,
  zeroCounters,
} from './transport.js';

export interface FileTransportConfig {
  /** A file's path, or `-` for stdin. */
  path: string;
  /** More files read with it, merged by event time. */
  more?: string[];
  /** Lines gathered into one delivery (default 8,192): larger means fewer, larger store writes. */
  linesPerDelivery?: number;
}

export class FileTransport implements Transport {
  readonly type = 'file';
  readonly bounded = true;
  private readonly path: string;
  private readonly paths: string[];
  private readonly perDelivery: number;
  private stopped = false;
  /** Where the next line to fill starts in its chunk's bytes. */
  private byteAt = 0;
  private done: Promise<void> | undefined;
  private readonly c: TransportCounters = zeroCounters();

  constructor(config: FileTransportConfig) {
    this.path = config.path;
    this.paths = [config.path, ...(config.more ?? [])];
    this.perDelivery = config.linesPerDelivery ?? 8192;
  }

  get name(): string {
    return this.path === '-' ? 'stdin' : this.paths.join(' + ');
  }

  async publish(): Promise<void> {
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `${this.name} is read, not written: a file source takes no publish`,
    );
  }

  /** Checks the input can be read, then reads it in the background; `drain` says when it is done. */
  async consume(handler: DeliveryHandler): Promise<void> {
    if (this.done) throw new RankwatchError('RANKWATCH_ERR_USAGE', 'one handler per transport');
    for (const path of this.paths) {
      if (path === '-') continue;
      // Node's own errors (ENOENT, EACCES…) carry the path: the CLI names the flag (cli/fail.ts).
      // Said before anything is read.
      if (statSync(path).isDirectory())
        throw Object.assign(new Error(`EISDIR: ${path} is a folder`), { code: 'EISDIR', path });
    }
    this.done = this.paths.length > 1 ? this.readMerged(handler) : this.read(handler);
    this.done.catch(() => {}); // surfaced by drain()
  }

  private async read(handler: DeliveryHandler): Promise<void> {
    let d = this.empty(0);
    for await (const chunk of readLineChunks(this.path)) {
      if (this.stopped) return;
      this.byteAt = 0;
      for (let i = 0; i < chunk.lines.length; ) {
        i = this.fill(d, chunk, i);
        if (d.events.length < this.perDelivery) continue;
        this.c.delivered_batches++;
        await handler(d);
        d = this.empty(d.offset + 1);
      }
    }
    if (d.events.length + d.undecodable!.length === 0) return;
    this.c.delivered_batches++;
    await handler(d);
  }

  /**
   * Parses lines from `from` into the delivery until it is full; returns the next line's index.
   * Synchronous and apart from the awaiting loop: the per-line work stays in one plain function.
   * A line of a shape seen before is read from its bytes (stream/scan.ts), exactly as JSON.parse
   * would read it; any other goes to JSON.parse.
   */
  private fill(d: Delivery, { lines, first, bytes }: LineChunk, from: number): number {
    const { events, undecodable } = d;
    const kept = d.lines!;
    const numbers = d.lineNumbers!;
    let i = from;
    let at = this.byteAt;
    for (; i < lines.length && events.length < this.perDelivery; at += lines[i].length + 1, i++) {
      let line = lines[i];
      if (line.length === 0) continue;
      let value: unknown;
      // CRLF, padding, a byte-order mark: the stored raw event is the line without them.
      if (mayBePadded(line)) {
        line = line.trim();
        if (line.length === 0) continue;
      } else if (bytes !== undefined) value = scanLine(line, bytes, at);
      if (value === undefined) {
        try {
          value = JSON.parse(line);
        } catch (err) {
          undecodable!.push({
            raw: line,
            reason: `not valid JSON: ${(err as Error).message}`,
            line: first + i,
          });
          continue;
        }
        learn(value);
      }
      events.push(value);
      kept.push(line);
      numbers.push(first + i);
    }
    this.byteAt = at;
    return i;
  }

  /** Several files, the earliest next event of any first. */
  private async readMerged(handler: DeliveryHandler): Promise<void> {
    let d = this.empty(0);
    let offset = 0;
    const bad = (u: Undecodable) => d.undecodable!.push(u);
    const cursors = this.paths.map((p) => new Cursor(p));
    for (const c of cursors) await c.next(bad);
    for (;;) {
      if (this.stopped) return;
      let c: Cursor | undefined;
      for (const x of cursors) if (x.head && (!c || x.head.ts < c.head!.ts)) c = x;
      if (!c) break;
      const h = c.head!;
      d.events.push(h.value);
      d.lines!.push(h.line);
      d.lineNumbers!.push(h.lineNo);
      await c.next(bad);
      if (d.events.length >= this.perDelivery) {
        this.c.delivered_batches++;
        await handler(d);
        d = this.empty(++offset);
      }
    }
    if (d.events.length + d.undecodable!.length === 0) return;
    this.c.delivered_batches++;
    await handler(d);
  }

  private empty(offset: number): Delivery {
    return { key: this.name, partition: 0, offset, events: [], lines: [], undecodable: [], lineNumbers: [] };
  }

  /** Resolves once the whole input was read and handled; rejects with what stopped the reading. */
  async drain(): Promise<void> {
    await this.done;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done?.catch(() => {});
  }

  counters(): TransportCounters {
    return { ...this.c };
  }
}

type Undecodable = NonNullable<Delivery['undecodable']>[number];

/** One file of a merged read: its next event (parsed, with its time) and where it is. */
class Cursor {
  private readonly it: AsyncIterator<LineChunk>;
  private lines: string[] = [];
  private bytes: Buffer | undefined;
  private first = 0;
  private i = 0;
  /** Where line `i` starts in `bytes`. */
  private at = 0;
  head: { value: unknown; line: string; lineNo: number; ts: number } | undefined;

  constructor(private readonly path: string) {
    this.it = readLineChunks(path)[Symbol.asyncIterator]();
  }

  /**
   * Moves to the next line that is JSON; the others go to `bad`, named by file and line. As in a
   * single file's read, a line of a shape seen before is read from its bytes (stream/scan.ts).
   */
  async next(bad: (u: Undecodable) => void): Promise<void> {
    for (;;) {
      while (this.i < this.lines.length) {
        const lineNo = this.first + this.i;
        const raw = this.lines[this.i++];
        const at = this.at;
        this.at += raw.length + 1;
        if (raw.length === 0) continue;
        let line = raw;
        let value: unknown;
        // CRLF, padding, a byte-order mark: the stored raw event is the line without them.
        if (mayBePadded(raw)) {
          line = raw.trim();
          if (line.length === 0) continue;
        } else if (this.bytes !== undefined) value = scanLine(line, this.bytes, at);
        if (value === undefined) {
          try {
            value = JSON.parse(line);
          } catch (err) {
            bad({
              raw: line,
              reason: `${this.path}: not valid JSON: ${(err as Error).message}`,
              line: lineNo,
            });
            continue;
          }
          learn(value);
        }
        const ts = (value as { ts?: unknown } | null)?.ts;
        // No time to place it by: it goes at once (and is set aside as the events' check says).
        this.head = { value, line, lineNo, ts: typeof ts === 'number' ? ts : Number.NEGATIVE_INFINITY };
        return;
      }
      const r = await this.it.next();
      if (r.done) {
        this.head = undefined;
        return;
      }
      ({ first: this.first, lines: this.lines, bytes: this.bytes } = r.value);
      this.i = 0;
      this.at = 0;
    }
  }
}
