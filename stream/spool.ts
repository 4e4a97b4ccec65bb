/**
 * A disk journal of batches for when the bus is unreachable: append at the tail, read and
 * acknowledge from the head, oldest first. Batches are JSON lines in numbered segment files, and
 * the head position is a small cursor file, so a restarted process finds what it had not sent.
 * A size cap keeps a long outage from filling the disk: past it, whole oldest segments are
 * dropped, and `onDropOldest` (a warning on stderr by default) says how many bytes went.
 *
 * Durability: an append that resolved survives a crash of the process (SIGKILL) either way: the
 * bytes are in the OS page cache. With `fsync` on, each append is also flushed to the device
 * (fdatasync) before it resolves, so it survives a machine crash or power loss too; without it a
 * machine crash can lose the last writes (a torn last line is skipped on read). The cursor is not
 * fsynced: a lost cursor replays batches already acknowledged (at least once, never lost).
 */
import { existsSync } from 'node:fs';
import {
  appendFile,
  mkdir,
  open as openFile,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  writeFile,
} from 'node:fs/promises';
import { join } from 'node:path';
import { RankwatchError } from '../core/errors.js';
import type { Batch } from './transport.js';

export interface DiskSpoolConfig {
  /** Folder of the journal; created when missing. One spool per folder. */
  dir: string;
  /** Size cap on disk; past it the oldest segments are dropped. */
  maxBytes: number;
  /** Called with the bytes dropped when the cap is hit; default: a process warning on stderr. */
  onDropOldest?: (droppedBytes: number) => void;
  /** Segment size before a new file is started (default: min(8 MiB, maxBytes / 4)). */
  segmentBytes?: number;
  /** fdatasync each append before it resolves (machine-crash safe; default false). */
  fsync?: boolean;
}

interface Segment {
  seq: number;
  bytes: number;
  /** Each line's size, for a segment this process wrote (every line a batch): acks need not read it back. */
  written?: number[];
}

/** Where the head is: segment, lines and bytes of it already acknowledged. */
interface Cursor {
  seq: number;
  line: number;
  bytes: number;
}

const SEGMENT = /^seg-(\d{12})\.jsonl$/;
const segName = (seq: number) => `seg-${String(seq).padStart(12, '0')}.jsonl`;

export class DiskSpool {
  private segments: Segment[] = [];
  private cursor: Cursor = { seq: 0, line: 0, bytes: 0 };
  private readonly segmentBytes: number;
  private readonly onDrop: (bytes: number) => void;
  private opened: Promise<void> | undefined;
  /** Serializes every operation: appends, reads and acks never interleave. */
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;
  /** The tail left by an earlier process may end in a torn line: never append after it. */
  private tailSealed = true;
  /** Head segment, parsed, so repeated reads do not reparse it. */
  private headCache: { seq: number; lines: { batch?: Batch; bytes: number }[] } | undefined;

  constructor(private readonly cfg: DiskSpoolConfig) {
    if (!(cfg.maxBytes > 0))
      throw new RankwatchError('RANKWATCH_ERR_CONFIG', 'spool maxBytes must be a positive number');
    this.segmentBytes = Math.max(
      1,
      Math.floor(cfg.segmentBytes ?? Math.min(8 << 20, Math.max(1, cfg.maxBytes / 4))),
    );
    this.onDrop =
      cfg.onDropOldest ??
      ((bytes) =>
        process.emitWarning(
          `spool ${cfg.dir} is over its cap of ${cfg.maxBytes} bytes: dropped the oldest ${bytes} bytes of events`,
          'RankwatchSpoolWarning',
        ));
  }

  /** Appends batches at the tail, in order. */
  append(batches: Batch[]): Promise<void> {
    return this.serial(async () => {
      if (batches.length === 0) return;
      const lines = batches.map(batchLine);
      const text = lines.join('');
      let tail = this.segments.at(-1);
      if (!tail || tail.bytes >= this.segmentBytes || this.tailSealed) {
        tail = { seq: Math.max(tail?.seq ?? -1, this.cursor.seq - 1) + 1, bytes: 0, written: [] };
        this.segments.push(tail);
        this.tailSealed = false;
      }
      const file = join(this.cfg.dir, segName(tail.seq));
      if (this.cfg.fsync) await appendSynced(file, text, tail.bytes === 0 ? this.cfg.dir : undefined);
      else await appendFile(file, text);
      for (const l of lines) {
        const bytes = Buffer.byteLength(l);
        tail.bytes += bytes;
        tail.written?.push(bytes);
      }
      await this.enforceCap();
    });
  }

  /** The oldest batches not yet acknowledged, at most `max`, without removing them. */
  read(max = 256): Promise<Batch[]> {
    return this.serial(async () => {
      const out: Batch[] = [];
      for (const seg of this.segments) {
        if (out.length >= max) break;
        const lines = await this.lines(seg);
        const from = seg.seq === this.cursor.seq ? this.cursor.line : 0;
        for (let i = from; i < lines.length && out.length < max; i++) {
          const b = lines[i].batch;
          if (b) out.push(b);
        }
      }
      return out;
    });
  }

  /** Removes the `n` oldest batches (those `read` returned and the caller has delivered). */
  ack(n: number): Promise<void> {
    return this.serial(async () => {
      let left = n;
      while (left > 0 && this.segments.length > 0) {
        const seg = this.segments[0];
        const lines = seg.written?.map((bytes) => ({ batch: true, bytes })) ?? (await this.lines(seg));
        if (this.cursor.seq !== seg.seq) this.cursor = { seq: seg.seq, line: 0, bytes: 0 };
        while (left > 0 && this.cursor.line < lines.length) {
          const l = lines[this.cursor.line++];
          this.cursor.bytes += l.bytes;
          if (l.batch) left--;
        }
        // Torn or corrupt lines after the last good one are consumed with it.
        while (this.cursor.line < lines.length && !lines[this.cursor.line].batch) {
          this.cursor.bytes += lines[this.cursor.line++].bytes;
        }
        if (this.cursor.line >= lines.length) {
          await this.removeHead();
        }
      }
      await this.saveCursor();
    });
  }

  /** Bytes on disk not yet acknowledged. */
  bytes(): number {
    let total = 0;
    for (const s of this.segments) total += s.bytes;
    if (this.segments[0]?.seq === this.cursor.seq) total -= this.cursor.bytes;
    return Math.max(0, total);
  }

  /** Waits for pending operations; the journal stays on disk for the next process. Idempotent. */
  close(): Promise<void> {
    const p = this.chain.then(() => {
      this.closed = true;
    });
    this.chain = p;
    return p;
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = async () => {
      if (this.closed) throw new RankwatchError('RANKWATCH_ERR_STOPPED', `spool ${this.cfg.dir} is closed`);
      await this.open();
      return fn();
    };
    const p = this.chain.then(run, run);
    this.chain = p.catch(() => {});
    return p;
  }

  private open(): Promise<void> {
    this.opened ??= (async () => {
      await mkdir(this.cfg.dir, { recursive: true });
      const names = (await readdir(this.cfg.dir)).filter((n) => SEGMENT.test(n)).sort();
      for (const n of names) {
        const seq = Number(SEGMENT.exec(n)![1]);
        this.segments.push({ seq, bytes: (await stat(join(this.cfg.dir, n))).size });
      }
      const cursorFile = join(this.cfg.dir, 'cursor.json');
      if (existsSync(cursorFile)) {
        try {
          const c = JSON.parse(await readFile(cursorFile, 'utf8')) as Cursor;
          if (this.segments[0]?.seq === c.seq) this.cursor = c;
          else this.cursor = { seq: this.segments[0]?.seq ?? c.seq, line: 0, bytes: 0 };
        } catch {
          // A torn cursor replays the head segment from its start: at least once, not lost.
        }
      } else if (this.segments[0]) {
        this.cursor = { seq: this.segments[0].seq, line: 0, bytes: 0 };
      }
    })();
    return this.opened;
  }

  private async lines(seg: Segment): Promise<{ batch?: Batch; bytes: number }[]> {
    if (this.headCache?.seq === seg.seq && seg.seq !== this.segments.at(-1)?.seq) return this.headCache.lines;
    const text = await readFile(join(this.cfg.dir, segName(seg.seq)), 'utf8');
    const parts = text.split('\n');
    const out: { batch?: Batch; bytes: number }[] = [];
    for (let i = 0; i < parts.length; i++) {
      const last = i === parts.length - 1;
      if (last && parts[i] === '') break;
      const bytes = Buffer.byteLength(parts[i]) + (last ? 0 : 1);
      try {
        const b = JSON.parse(parts[i]) as Batch;
        out.push(typeof b?.key === 'string' && Array.isArray(b.events) ? { batch: b, bytes } : { bytes });
      } catch {
        out.push({ bytes }); // a torn write from a crash: skipped
      }
    }
    // The tail still grows; any other segment is immutable and safe to keep parsed.
    if (seg.seq === this.segments[0]?.seq && seg.seq !== this.segments.at(-1)?.seq)
      this.headCache = { seq: seg.seq, lines: out };
    return out;
  }

  private async removeHead(): Promise<void> {
    const seg = this.segments.shift()!;
    await rm(join(this.cfg.dir, segName(seg.seq)), { force: true });
    this.headCache = undefined;
    this.cursor = { seq: this.segments[0]?.seq ?? seg.seq + 1, line: 0, bytes: 0 };
  }

  private async enforceCap(): Promise<void> {
    let dropped = 0;
    while (this.bytes() > this.cfg.maxBytes && this.segments.length > 1) {
      dropped += this.segments[0].bytes - (this.cursor.seq === this.segments[0].seq ? this.cursor.bytes : 0);
      await this.removeHead();
    }
    if (dropped > 0) {
      await this.saveCursor();
      this.onDrop(dropped);
    }
  }

  private async saveCursor(): Promise<void> {
    const file = join(this.cfg.dir, 'cursor.json');
    await writeFile(`${file}.tmp`, JSON.stringify(this.cursor));
    await rename(`${file}.tmp`, file);
  }
}

/**
 * One journal line: the events' own text when the publisher kept it (ingest), else encoded here.
 * Each kept line parsed as JSON on its own and holds no newline, so the joined array is valid JSON.
 */
function batchLine(b: Batch): string {
  const events = b.lines?.length === b.events.length ? `[${b.lines.join(',')}]` : JSON.stringify(b.events);
  return `{"key":${JSON.stringify(b.key)},"events":${events}}\n`;
}

/** Appends and fdatasyncs; a new file also fsyncs its folder, so the file itself survives. */
async function appendSynced(file: string, text: string, newInDir?: string): Promise<void> {
  const fh = await openFile(file, 'a');
  try {
    await fh.appendFile(text);
    await fh.datasync();
  } finally {
    await fh.close();
  }
  if (newInDir) {
    const dh = await openFile(newInDir, 'r');
    try {
      await dh.sync();
    } finally {
      await dh.close();
    }
  }
}
