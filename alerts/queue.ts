/**
 * A bounded queue drained by one worker: `push` never waits, so a receiver that is down never
 * holds the pipeline. When full, the oldest job is dropped and counted (the newest state of a
 * finding matters more than an old one).
 */
export interface QueueCounters {
  queued: number;
  sent: number;
  dropped_full: number;
  failed: number;
  depth: number;
}

export class BoundedQueue<T> {
  private readonly items: T[] = [];
  private running: Promise<void> | undefined;
  private readonly c = { queued: 0, sent: 0, dropped_full: 0, failed: 0 };

  constructor(
    private readonly capacity: number,
    private readonly work: (item: T) => Promise<void>,
  ) {}

  push(item: T): void {
    if (this.items.length >= this.capacity) {
      this.items.shift();
      this.c.dropped_full++;
    }
    this.items.push(item);
    this.c.queued++;
    this.running ??= this.run();
  }

  /** Resolves once everything queued so far has been tried. */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  stats(): QueueCounters {
    return { ...this.c, depth: this.items.length };
  }

  private async run(): Promise<void> {
    try {
      for (let item = this.items.shift(); item !== undefined; item = this.items.shift()) {
        try {
          await this.work(item);
          this.c.sent++;
        } catch {
          // The worker has audited or dead-lettered it; the queue only counts.
          this.c.failed++;
        }
      }
    } finally {
      this.running = undefined;
    }
  }
}
