/**
 * A disk journal of batches for when the bus is unreachable: append at the tail, read and
 * acknowledge from the head, oldest first. Batches are records (stream/spool-records.ts:
 * self-delimiting, with a CRC) in numbered segment files, and the head position is a small cursor
 * file, so a restarted process finds what it had not sent. A size cap keeps a long outage from
 * filling the disk: past it, whole oldest segments are dropped, and `onDropOldest` (a warning on
 * stderr by default) says how many bytes went.
 *
 * Durability: an append that resolved survives a crash of the process (SIGKILL) either way: the
 * bytes are in the OS page cache. With `fsync` on, each append is also flushed to the device
 * (fdatasync) before it resolves, so it survives a machine crash or power loss too.
 *
 * An append that fails (a short write on a full disk, a failed fdatasync) resolves nothing: its
 * bytes are cut back (the segment truncated to its last whole record) and it rejects with
 * RANKWATCH_ERR_JOURNAL_WRITE, retriable, for the caller to hold and retry. When even the cut
 * fails, the segment is sealed and the next append starts a new one. Readers skip any torn bytes
 * to the next whole record, so what was acknowledged is read back whatever lies between. The
 * cursor is not fsynced and a failed cursor write is not an error: a lost cursor replays batches
 * already acknowledged (at least once, never lost).
 */
import { existsSync } from 'node:fs';
import {
  type FileHandle,
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
import { encodeRecords, type SegmentFormat, scanSegment } from './spool-records.js';
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
  /** Told after each append: nothing when it was written, else why not (for a health check). */
  onAppend?: (failure?: RankwatchError) => void;
}

/** A place in the journal: a segment and a byte offset in it, at a record boundary. */
export interface SpoolPosition {
  seq: number;
  offset: number;
}

interface Segment {
  seq: number;
  format: SegmentFormat;
  /** Size of the file. */
  bytes: number;
  /**
   * Each record's size, for a segment this process appended to (every one a whole batch): acks
   * need not read it back. Absent for a segment to list from its file.
   */
  written?: number[];
  /** Never appended to again: an earlier process's, or one whose failed append could not be cut back. */
  sealed: boolean;
  /** Its folder was fsynced after the file was made (fsync mode), so the file itself survives. */
  linked?: boolean;
}

/**
 * Where the head is: the segment and bytes of it already acknowledged, and how many of its
 * spans (records or skipped runs) that is; -1 until the segment's spans are listed.
 */
interface Cursor {
  seq: number;
  bytes: number;
  line: number;
}

const SEGMENT = /^seg-(\d{12})\.(rec|jsonl)$/;
const segName = (s: { seq: number; format: SegmentFormat }) =>
  `seg-${String(s.seq).padStart(12, '0')}.${s.format}`;

export class DiskSpool {
  private segments: Segment[] = [];
  private cursor: Cursor = { seq: 0, bytes: 0, line: 0 };
  private readonly segmentBytes: number;
  private readonly onDrop: (bytes: number) => void;
  private opened: Promise<void> | undefined;
  /** Serializes every operation: appends, reads and acks never interleave. */
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;
  /** The tail segment's file, open for appending. */
  private tail: { seq: number; fh: FileHandle } | undefined;
  /**
   * The head segment's spans when listed from its file: a record's size, or minus the size of a
   * run of bytes that is no record (torn). A listed segment is sealed, so the list stays true.
   */
  private headSpans: { seq: number; spans: number[] } | undefined;

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

  /**
   * Appends batches at the tail, in order. Resolves once all are whole in the file (and synced,
   * with `fsync`); rejects with RANKWATCH_ERR_JOURNAL_WRITE, having kept none of them, otherwise.
   */
  append(batches: Batch[]): Promise<void> {
    return this.serial(async () => {
      if (batches.length === 0) return;
      const { data, sizes } = encodeRecords(batches);
      const tail = await this.tailForAppend();
      let written = false;
      try {
        const fh = await this.handle(tail);
        written = true;
        for (let off = 0; off < data.length; ) {
          const { bytesWritten } = await fh.write(data, off, data.length - off);
          if (!(bytesWritten > 0)) throw new Error('the file took no bytes');
          off += bytesWritten;
        }
        if (this.cfg.fsync) await fh.datasync();
      } catch (err) {
        if (written) await this.cutBack(tail);
        const failure = new RankwatchError(
          'RANKWATCH_ERR_JOURNAL_WRITE',
          `cannot write to ${this.cfg.dir}: ${(err as Error).message}; none of the ${batches.length} batch(es) was kept`,
          { cause: err },
        );
        this.cfg.onAppend?.(failure);
        throw failure;
      }
      tail.bytes += data.length;
      for (const s of sizes) tail.written?.push(s);
      this.cfg.onAppend?.();
      await this.enforceCap();
    });
  }

  /** The oldest batches not yet acknowledged, at most `max`, without removing them. */
  async read(max = 256): Promise<Batch[]> {
    return (await this.readFrom(undefined, { batches: max })).batches;
  }

  /**
   * Batches from `from` (default: the oldest not acknowledged), at most `limit.batches` of them
   * and about `limit.bytes` (at least one), and the position after them for the next call:
   * reading a journal of any size a bounded chunk at a time. `bytes` is how far that moved.
   */
  readFrom(
    from: SpoolPosition | undefined,
    limit: { batches: number; bytes?: number },
  ): Promise<{ batches: Batch[]; next: SpoolPosition; bytes: number }> {
    return this.serial(async () => {
      if (!from) await this.settleCursor();
      const start = from ?? { seq: this.cursor.seq, offset: this.cursor.bytes };
      const maxBytes = limit.bytes ?? Number.POSITIVE_INFINITY;
      const out: Batch[] = [];
      let next = start;
      let took = 0;
      let moved = 0;
      scan: for (const seg of this.segments) {
        if (seg.seq < start.seq) continue;
        if (seg.seq > next.seq) next = { seq: seg.seq, offset: 0 };
        const offset = seg.seq === start.seq ? start.offset : 0;
        for await (const r of scanSegment(this.file(seg), seg.format, offset)) {
          if (r.batch && (out.length >= limit.batches || (out.length > 0 && took >= maxBytes))) break scan;
          next = { seq: seg.seq, offset: r.offset + r.bytes };
          moved += r.bytes;
          if (r.batch) {
            out.push(r.batch);
            took += r.bytes;
          }
        }
      }
      return { batches: out, next, bytes: moved };
    });
  }

  /** Removes the `n` oldest batches (those `read` returned and the caller has delivered). */
  ack(n: number): Promise<void> {
    return this.serial(async () => {
      await this.settleCursor();
      let left = n;
      while (left > 0 && this.segments.length > 0) {
        const seg = this.segments[0];
        const spans = await this.spansOf(seg);
        if (this.cursor.seq !== seg.seq) this.cursor = { seq: seg.seq, bytes: 0, line: 0 };
        while (left > 0 && this.cursor.line < spans.length) {
          const s = spans[this.cursor.line++];
          this.cursor.bytes += Math.abs(s);
          if (s > 0) left--;
        }
        // Torn runs after the last good record are consumed with it.
        while (this.cursor.line < spans.length && spans[this.cursor.line] < 0)
          this.cursor.bytes -= spans[this.cursor.line++];
        if (this.cursor.line < spans.length) break;
        await this.removeHead();
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

  /** Resolves once the journal an earlier process left is known (the first operation does this too). */
  ready(): Promise<void> {
    return this.serial(async () => {});
  }

  /** Waits for pending operations; the journal stays on disk for the next process. Idempotent. */
  close(): Promise<void> {
    const p = this.chain.then(async () => {
      this.closed = true;
      await this.closeTail();
    });
    this.chain = p.catch(() => {});
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

  private file(seg: { seq: number; format: SegmentFormat }): string {
    return join(this.cfg.dir, segName(seg));
  }

  private open(): Promise<void> {
    this.opened ??= (async () => {
      await mkdir(this.cfg.dir, { recursive: true });
      const found: Segment[] = [];
      for (const n of await readdir(this.cfg.dir)) {
        const m = SEGMENT.exec(n);
        if (!m) continue;
        const seg: Segment = { seq: Number(m[1]), format: m[2] as SegmentFormat, bytes: 0, sealed: true };
        seg.bytes = (await stat(this.file(seg))).size;
        found.push(seg);
      }
      found.sort((a, b) => a.seq - b.seq);
      let saved: { seq?: unknown; bytes?: unknown } | undefined;
      const cursorFile = join(this.cfg.dir, 'cursor.json');
      if (existsSync(cursorFile)) {
        try {
          saved = JSON.parse(await readFile(cursorFile, 'utf8'));
        } catch {
          // A torn cursor replays the head segment from its start: at least once, not lost.
        }
      }
      const seq = typeof saved?.seq === 'number' ? saved.seq : undefined;
      // Segments before the cursor's were acknowledged to their end (their removal did not finish).
      while (seq !== undefined && found.length > 0 && found[0].seq < seq) {
        await rm(this.file(found.shift()!), { force: true }).catch(() => {});
      }
      this.segments = found;
      if (seq !== undefined && found[0]?.seq === seq && typeof saved?.bytes === 'number')
        this.cursor = { seq, bytes: saved.bytes, line: -1 };
      else this.cursor = { seq: found[0]?.seq ?? seq ?? 0, bytes: 0, line: 0 };
    })();
    return this.opened;
  }

  /**
   * A cursor read from disk is a byte offset; places it on the record boundary at or before it
   * (one written by an earlier version may fall inside a line), so reads and acks agree.
   */
  private async settleCursor(): Promise<void> {
    if (this.cursor.line >= 0) return;
    const head = this.segments[0];
    if (!head || head.seq !== this.cursor.seq) {
      this.cursor = { seq: head?.seq ?? this.cursor.seq, bytes: 0, line: 0 };
      return;
    }
    const spans = await this.spansOf(head);
    let line = 0;
    let bytes = 0;
    while (line < spans.length && bytes + Math.abs(spans[line]) <= this.cursor.bytes)
      bytes += Math.abs(spans[line++]);
    this.cursor = { seq: head.seq, bytes, line };
  }

  private async spansOf(seg: Segment): Promise<number[]> {
    if (seg.written) return seg.written;
    if (this.headSpans?.seq === seg.seq) return this.headSpans.spans;
    const spans: number[] = [];
    for await (const r of scanSegment(this.file(seg), seg.format, 0))
      spans.push(r.batch ? r.bytes : -r.bytes);
    this.headSpans = { seq: seg.seq, spans };
    return spans;
  }

  /** The segment the next append goes to: the tail, or a new one (not listed until its file exists). */
  private async tailForAppend(): Promise<Segment> {
    const last = this.segments.at(-1);
    if (last && !last.sealed && last.bytes < this.segmentBytes) return last;
    await this.closeTail();
    if (last) last.sealed = true;
    return {
      seq: Math.max(last?.seq ?? -1, this.cursor.seq - 1) + 1,
      format: 'rec',
      bytes: 0,
      written: [],
      sealed: false,
    };
  }

  private async handle(seg: Segment): Promise<FileHandle> {
    if (this.tail?.seq !== seg.seq) {
      await this.closeTail();
      this.tail = { seq: seg.seq, fh: await openFile(this.file(seg), 'a') };
      if (this.segments.at(-1) !== seg) this.segments.push(seg);
    }
    if (this.cfg.fsync && !seg.linked) {
      const dh = await openFile(this.cfg.dir, 'r');
      try {
        await dh.sync();
      } finally {
        await dh.close();
      }
      seg.linked = true;
    }
    return this.tail.fh;
  }

  /**
   * After a failed append: truncates the tail to its last whole record. When that fails too, the
   * segment is sealed (nothing is appended after its torn bytes; readers skip them) and listed
   * from its file from now on, as a reader at the next start would see it.
   */
  private async cutBack(seg: Segment): Promise<void> {
    try {
      if (this.tail?.seq !== seg.seq) throw new Error('not open');
      await this.tail.fh.truncate(seg.bytes);
    } catch {
      seg.sealed = true;
      seg.written = undefined;
      seg.bytes = await stat(this.file(seg)).then(
        (s) => s.size,
        () => seg.bytes,
      );
      await this.closeTail();
    }
  }

  private async closeTail(): Promise<void> {
    const t = this.tail;
    this.tail = undefined;
    await t?.fh.close().catch(() => {});
  }

  private async removeHead(): Promise<void> {
    const seg = this.segments.shift()!;
    if (this.tail?.seq === seg.seq) await this.closeTail();
    // A file left behind (rm failed) is before the cursor: the next start removes it.
    await rm(this.file(seg), { force: true }).catch(() => {});
    this.headSpans = undefined;
    this.cursor = { seq: this.segments[0]?.seq ?? seg.seq + 1, bytes: 0, line: 0 };
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

  /** Best effort: a cursor that could not be written (a full disk) only means a replay from the last one. */
  private async saveCursor(): Promise<void> {
    const file = join(this.cfg.dir, 'cursor.json');
    try {
      await writeFile(`${file}.tmp`, JSON.stringify({ seq: this.cursor.seq, bytes: this.cursor.bytes }));
      await rename(`${file}.tmp`, file);
    } catch {
      // the next acknowledgement writes it again
    }
  }
}
