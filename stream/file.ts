/**
 * A recorded input as a bus: the JSON lines of a file (or stdin; plain or gzip) delivered in
 * order, a chunk of lines per delivery, each delivery awaited before the next is read, so the
 * pipeline's pace is the reading pace. Lines that are not JSON come with their line number in
 * `undecodable`; every event carries its line number too, so what is set aside can be found in the
 * file. `replay` reads through this, with the same pipeline `up` and `detect` run.
 */
import { statSync } from 'node:fs';
import { RankwatchError } from '../core/errors.js';
import { readLineChunks } from './lines.js';
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
  /** Lines gathered into one delivery (default 8,192): larger means fewer, larger store writes. */
  linesPerDelivery?: number;
}

export class FileTransport implements Transport {
  readonly type = 'file';
  readonly bounded = true;
  private readonly path: string;
  private readonly perDelivery: number;
  private stopped = false;
  private done: Promise<void> | undefined;
  private readonly c: TransportCounters = zeroCounters();

  constructor(config: FileTransportConfig) {
    this.path = config.path;
    this.perDelivery = config.linesPerDelivery ?? 8192;
  }

  get name(): string {
    return this.path === '-' ? 'stdin' : this.path;
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
    if (this.path !== '-') {
      let folder = false;
      try {
        folder = statSync(this.path).isDirectory();
      } catch {
        throw new RankwatchError('RANKWATCH_ERR_INPUT', `no such file: ${this.path}`);
      }
      // Said before anything is read, as the CLI says a path error (cli/fail.ts).
      if (folder)
        throw Object.assign(new Error(`EISDIR: ${this.path} is a folder`), {
          code: 'EISDIR',
          path: this.path,
        });
    }
    this.done = this.read(handler);
    this.done.catch(() => {}); // surfaced by drain()
  }

  private async read(handler: DeliveryHandler): Promise<void> {
    let d = this.empty(0);
    for await (const { first, lines } of readLineChunks(this.path)) {
      if (this.stopped) return;
      for (let i = 0; i < lines.length; ) {
        i = this.fill(d, lines, first, i);
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
   */
  private fill(d: Delivery, lines: string[], first: number, from: number): number {
    const { events, undecodable } = d;
    const kept = d.lines!;
    const numbers = d.lineNumbers!;
    let i = from;
    for (; i < lines.length && events.length < this.perDelivery; i++) {
      let line = lines[i];
      if (line.length === 0) continue;
      // CRLF and padding: the stored raw event is the line without them.
      if (line.charCodeAt(line.length - 1) <= 32 || line.charCodeAt(0) <= 32) {
        line = line.trim();
        if (line.length === 0) continue;
      }
      let value: unknown;
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
      events.push(value);
      kept.push(line);
      numbers.push(first + i);
    }
    return i;
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
