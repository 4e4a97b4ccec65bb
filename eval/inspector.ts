/**
 * The Inspector path of `rankwatch eval`: a simulated job's collectives reach the detectors as they
 * would from the field. The simulator writes what NCCL Inspector would (one dump file per process,
 * sim/inspector.ts); the collector's Inspector intake (the same code `rankwatch collect
 * --nccl-inspector DIR --nccl-inspector-all-hosts` runs: parser, (host, pid) → rank map fed by the
 * hook's step events, edge reduction) reads those files back as they grow, on a clock that is the
 * job's event time, ticking every `pollMs` as the source does; what it sends joins the hook's
 * events on the way to the detectors, in the order a bus would carry them: a step's reduced
 * collectives arrive `settleMs` after its step events, as they do live.
 */
import { closeSync, fstatSync, mkdtempSync, openSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RankMap } from '../collectors/ranks.js';
import { REDUCER_DEFAULTS } from '../collectors/reduce.js';
import { InspectorIntake } from '../collectors/sources/nccl_inspector.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { ClusterSim } from '../sim/cluster.js';
import { type InspectorDumpOptions, InspectorDumps } from '../sim/inspector.js';

export interface InspectorPathOptions extends Omit<InspectorDumpOptions, 'dir'> {
  /** How often the intake reads the files and moves on (the source's pollMs, default 500). */
  pollMs?: number;
}

/** What went through the Inspector path of one job. */
export interface InspectorPathStats {
  /** Records the dump files held: what would be on the wire without the edge reduction. */
  records: number;
  /** Reduced `collective` events the intake sent. */
  reduced: number;
  files: number;
  /** Records the intake could not use, by reason (none expected). */
  dropped: Record<string, number>;
  parseErrors: number;
  /** GPU-seconds of event time the job ran (ranks × its span). */
  gpuSeconds: number;
}

export const emptyStats = (): InspectorPathStats => ({
  records: 0,
  reduced: 0,
  files: 0,
  dropped: {},
  parseErrors: 0,
  gpuSeconds: 0,
});

const COLLECTOR = 'eval-collector';

/**
 * The job's events as the detectors get them on the Inspector path: the hook's events (steps
 * with their pid) at once, the collectives as the intake reduces them from the dump files.
 */
export function* throughInspector(
  sim: ClusterSim,
  o: InspectorPathOptions = {},
  stats: InspectorPathStats = emptyStats(),
): Generator<RankwatchEvent> {
  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-eval-inspector-'));
  const dumps = new InspectorDumps(sim, { ...o, dir });
  const reader = new GrowingFiles();
  const pollMs = o.pollMs ?? 500;
  const out: RankwatchEvent[] = [];
  let now = Number.NaN;
  const ranks = new RankMap({ localHosts: [COLLECTOR], maxProcesses: 1 << 20 });
  const intake = new InspectorIntake(
    { hosts: 'all', ...REDUCER_DEFAULTS },
    {
      host: COLLECTOR,
      logger: { info() {}, warn() {} },
      now: () => now,
      emit: (events) => {
        stats.reduced += events.length;
        out.push(...(events as RankwatchEvent[]));
      },
      parseProblems: (_source, problems) => {
        stats.parseErrors += problems.length;
      },
      sourceError: (_source, err) => {
        throw err;
      },
      pciMap: new Map(),
      ranks,
      dropped: (_source, reason, n) => {
        stats.dropped[reason] = (stats.dropped[reason] ?? 0) + n;
      },
    },
  );
  const read = (paths: Iterable<string>) => {
    for (const path of paths) intake.lines(path, reader.read(path));
  };
  let first = Number.NaN;
  let nextTick = Number.NaN;
  try {
    for (const e of sim.events()) {
      if (Number.isNaN(now)) {
        first = e.ts;
        nextTick = Math.ceil(e.ts / pollMs) * pollMs;
      }
      // The collector's clock moves with the job: each poll reads what was dumped by then.
      while (nextTick <= e.ts) {
        now = nextTick;
        read(dumps.flush(now));
        intake.tick(now);
        yield* out.splice(0);
        nextTick += pollMs;
      }
      if (!(e.ts <= now)) now = e.ts;
      const sent = dumps.take(e);
      if (!sent) continue;
      if (sent.kind === 'step') ranks.learn([sent]);
      yield sent;
    }
    // The job is over: the files are read to their end, then the collector stops.
    dumps.close();
    read(dumps.files);
    intake.stop(now);
    yield* out.splice(0);
    stats.records = dumps.records;
    stats.files = dumps.files.size;
    stats.gpuSeconds = (sim.opts.ranks * (now - first)) / 1000;
  } finally {
    dumps.close();
    reader.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Reads what was appended to files since the last read, as whole lines. */
class GrowingFiles {
  private readonly files = new Map<string, { fd: number; offset: number; rest: string }>();

  read(path: string): string[] {
    let f = this.files.get(path);
    if (!f) {
      f = { fd: openSync(path, 'r'), offset: 0, rest: '' };
      this.files.set(path, f);
    }
    const size = fstatSync(f.fd).size;
    if (size <= f.offset) return [];
    const buf = Buffer.allocUnsafe(size - f.offset);
    const n = readSync(f.fd, buf, 0, buf.length, f.offset);
    f.offset += n;
    const lines = (f.rest + buf.toString('utf8', 0, n)).split('\n');
    f.rest = lines.pop() ?? '';
    return lines;
  }

  close(): void {
    for (const f of this.files.values()) closeSync(f.fd);
    this.files.clear();
  }
}
