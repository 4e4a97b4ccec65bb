/** Writing JSON lines fast: buffered writes that respect backpressure (findings, dead letters, sim output). */
import { createWriteStream, openSync } from 'node:fs';
import type { Writable } from 'node:stream';

export class LineWriter {
  private buf: string[] = [];
  private size = 0;
  readonly stream: Writable;

  constructor(path: string | undefined) {
    // Opened here, synchronously, so a folder or an unwritable path is an error at once, naming the
    // path, rather than an 'error' event after the first write.
    this.stream =
      path === undefined || path === '-'
        ? process.stdout
        : createWriteStream(path, { fd: openSync(path, 'w') });
  }

  async write(line: string): Promise<void> {
    this.buf.push(line);
    this.size += line.length;
    if (this.size > 1 << 16) await this.flush();
  }

  async flush(): Promise<void> {
    if (this.buf.length === 0) return;
    const text = `${this.buf.join('\n')}\n`;
    this.buf = [];
    this.size = 0;
    if (!this.stream.write(text)) await new Promise<void>((r) => this.stream.once('drain', () => r()));
  }

  async close(): Promise<void> {
    await this.flush();
    if (this.stream === process.stdout) return;
    await new Promise<void>((resolve, reject) =>
      this.stream.end((err?: Error | null) => (err ? reject(err) : resolve())),
    );
  }
}
