/**
 * Follows a growing text file by polling (fs.watch misses events on network filesystems and in
 * containers), line by line. Survives rotation (the path now names another file: the old one is
 * read to its end first, the new one from its start) and truncation (size below the read
 * position: start over). A missing or unreadable file is reported and retried. A last line
 * without its newline (a writer that died mid-line, a finished file cut short) is handed over once
 * the file has stopped growing for `partialFlushMs`, and on stop(), which reads what was written
 * since the last poll first: never silently lost. CR of
 * CRLF is stripped.
 */
import { type FileHandle, open, stat } from 'node:fs/promises';
import { StringDecoder } from 'node:string_decoder';

export interface TailConfig {
  path: string;
  /** Where to begin on the first open: the end (only new lines) or the start. */
  from: 'start' | 'end';
  pollMs: number;
  /** A line longer than this is cut and reported (bounded memory). */
  maxLineBytes?: number;
  /** How long an unterminated last line waits for its newline before it is read as is. */
  partialFlushMs?: number;
}

export interface TailHandlers {
  onLines(lines: string[]): void;
  onError(err: unknown): void;
  /** Rotation and truncation, for the log. */
  onNotice?(msg: string): void;
  /** The file was rotated or truncated: what follows is a new file (for readers that keep context). */
  onReset?(): void;
  onLongLine?(bytes: number): void;
}

const CHUNK = 1 << 20;

export class FileTail {
  private fd: FileHandle | undefined;
  private ino = -1;
  private pos = 0;
  private partial = '';
  /** When the unterminated last line last grew. */
  private partialAt = 0;
  private decoder = new StringDecoder('utf8');
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private opened = false;
  private failing = false;
  private running: Promise<void> | undefined;

  constructor(
    private readonly cfg: TailConfig,
    private readonly h: TailHandlers,
  ) {}

  start(): void {
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
    // What was written since the last poll is read too: a follower stopped because its path went
    // (renamed away by a rotation, the new file not there yet) would lose the old file's last lines.
    if (this.fd) await this.readToEnd().catch(() => {});
    this.flushPartial();
    await this.fd?.close().catch(() => {});
    this.fd = undefined;
  }

  /** One poll; exposed so tests and `--once` runs can step it. */
  async poll(): Promise<void> {
    try {
      if (!this.fd) await this.openFile();
      const fd = this.fd!;
      const st = await fd.stat();
      if (st.size < this.pos) {
        this.h.onNotice?.(`${this.cfg.path} was truncated; reading it from the start`);
        this.pos = 0;
        this.partial = '';
        this.h.onReset?.();
      }
      const grew = await this.readToEnd();
      if (!grew && this.partial && Date.now() - this.partialAt >= (this.cfg.partialFlushMs ?? 5000))
        this.flushPartial();
      const now = await stat(this.cfg.path).catch(() => undefined);
      if (now && now.ino !== this.ino) {
        await this.readToEnd();
        this.flushPartial();
        this.h.onNotice?.(`${this.cfg.path} was rotated; following the new file`);
        this.h.onReset?.();
        await fd.close().catch(() => {});
        this.fd = undefined;
      }
      this.failing = false;
    } catch (err) {
      if (!this.failing) this.h.onError(err);
      this.failing = true;
      await this.fd?.close().catch(() => {});
      this.fd = undefined;
    }
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.poll().finally(() => this.schedule(this.cfg.pollMs));
    }, ms);
  }

  private async openFile(): Promise<void> {
    const fd = await open(this.cfg.path, 'r');
    const st = await fd.stat();
    this.fd = fd;
    this.ino = st.ino;
    // Only the very first open may skip history; a rotated-in or late-created file is new.
    this.pos = !this.opened && !this.failing && this.cfg.from === 'end' ? st.size : 0;
    this.opened = true;
    this.partial = '';
    this.decoder = new StringDecoder('utf8');
  }

  /** Reads what was appended; true when anything was. */
  private async readToEnd(): Promise<boolean> {
    const buf = Buffer.allocUnsafe(CHUNK);
    let grew = false;
    for (;;) {
      const { bytesRead } = await this.fd!.read(buf, 0, CHUNK, this.pos);
      if (bytesRead === 0) return grew;
      grew = true;
      this.pos += bytesRead;
      this.take(this.decoder.write(buf.subarray(0, bytesRead)));
      if (bytesRead < CHUNK) return grew;
    }
  }

  private take(text: string): void {
    const parts = (this.partial + text).split('\n');
    this.partial = parts.pop() ?? '';
    if (this.partial) this.partialAt = Date.now();
    const max = this.cfg.maxLineBytes ?? 1 << 20;
    if (this.partial.length > max) {
      this.h.onLongLine?.(this.partial.length);
      this.partial = '';
    }
    const lines = parts.map((l) => (l.endsWith('\r') ? l.slice(0, -1) : l));
    if (lines.length) this.h.onLines(lines);
  }

  private flushPartial(): void {
    const last = this.partial.endsWith('\r') ? this.partial.slice(0, -1) : this.partial;
    if (last) this.h.onLines([last]);
    this.partial = '';
  }
}
