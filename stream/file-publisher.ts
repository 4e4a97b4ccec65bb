/**
 * A Publisher that appends batches to a file as JSON lines: a collector's bus for offline runs
 * (`rankwatch collect --bus file:PATH`), whose output `rankwatch replay` reads. The file is opened
 * for appending, so a restarted collector adds to what it wrote before.
 */
import { type FileHandle, open } from 'node:fs/promises';
import { RankwatchError } from '../core/errors.js';
import { encodeLines } from './codec.js';
import type { Batch, Publisher } from './transport.js';

export class FilePublisher implements Publisher {
  readonly type = 'file';
  private stopped = false;
  private events = 0;

  private constructor(
    readonly path: string,
    private readonly file: FileHandle,
  ) {}

  /** Opens (or creates) the file for appending: a path that cannot be written is said at once. */
  static async open(path: string): Promise<FilePublisher> {
    try {
      return new FilePublisher(path, await open(path, 'a'));
    } catch (err) {
      throw new RankwatchError(
        'RANKWATCH_ERR_PATH',
        `bus file:${path} cannot be written (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
        { cause: err },
      );
    }
  }

  async publish(batches: Batch[]): Promise<void> {
    if (this.stopped) throw new RankwatchError('RANKWATCH_ERR_STOPPED', `bus file:${this.path} is closed`);
    let text = '';
    for (const b of batches) {
      text += b.lines ? b.lines.map((l) => `${l}\n`).join('') : encodeLines(b.events);
      this.events += b.events.length;
    }
    if (text !== '') await this.file.appendFile(text);
  }

  counters(): Record<string, number> {
    return { file_events: this.events };
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    await this.file.close();
  }
}
