/**
 * How far a bus partition may be committed when a runner holds input back (a job stage waits for
 * its shards' records, detectors/job-stage.ts): a committed offset promises that the output of
 * every message before it is stored and sunk, and a held event's output comes out only with the
 * delivery that releases it, maybe one of the other topic. So each take of the runner's output
 * notes, per `topic/partition`, the lowest offset still held (or, with none held, the offset past
 * the last one read), and that limit counts once the take's output, and every take's before it,
 * is stored and sunk (writes finish out of order: their takes are settled in take order).
 */

/** A take whose output is being written: what it makes true once written. */
export interface Take {
  limits: Map<string, number>;
  written: boolean;
}

export class CommitLimits {
  /** Per `topic/partition`, the offset past the last live message read. */
  private readonly read = new Map<string, number>();
  private readonly takes: Take[] = [];
  /** The limits of the latest take that is written, with all takes before it. */
  private settled = new Map<string, number>();

  /** A live message is being read (pushed to the runner). */
  reading(topic: string, partition: number, offset: number): void {
    // The furthest read: a delivery handled out of its partition's order must not move it back.
    const k = `${topic}/${partition}`;
    this.read.set(k, Math.max(offset + 1, this.read.get(k) ?? 0));
  }

  /** The runner's output was taken for a write; `held`: the lowest offset it holds per `topic/partition`. */
  taken(held: ReadonlyMap<string, number>): Take {
    const limits = new Map<string, number>();
    for (const [k, next] of this.read) limits.set(k, Math.min(next, held.get(k) ?? next));
    const t = { limits, written: false };
    this.takes.push(t);
    return t;
  }

  /** A take's output is stored and sunk. */
  written(t: Take): void {
    t.written = true;
    while (this.takes.length && this.takes[0].written) this.settled = this.takes.shift()!.limits;
  }

  /** The offset of `topic/partition` below which every message's output is out; undefined: none known. */
  limit(topic: string, partition: number): number | undefined {
    return this.settled.get(`${topic}/${partition}`);
  }

  /**
   * Partitions this process no longer owns: what it knew of them goes, so a partition that comes
   * back is limited by what is read from then on, not by a stale limit.
   */
  forget(partitions: readonly number[]): void {
    const gone = (k: string) => partitions.includes(Number(k.slice(k.lastIndexOf('/') + 1)));
    for (const m of [this.read, this.settled, ...this.takes.map((t) => t.limits)])
      for (const k of [...m.keys()]) if (gone(k)) m.delete(k);
  }
}
