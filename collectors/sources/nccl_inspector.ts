/**
 * Follows every dump file the NCCL Inspector plugin writes in a folder (NCCL_INSPECTOR_DUMP_DIR):
 * JSON dumps (`<hostname>-pid<pid>.log`, any v4.x, verbose or not) line by line as they grow,
 * files that appear later (from their start), rotated or truncated ones (FileTail), files that go
 * away (read to their end first); and Prometheus textfiles (`nccl_inspector_metrics_<uuid>.prom`),
 * each rewritten snapshot read once it has stopped changing. Operations go through the edge
 * reduction (collectors/reduce.ts): what leaves is one `collective` event per rank, step,
 * communicator and op. The Prometheus v5 aggregates, which name no pid and no count, leave as
 * `window: 'interval'` events of the rank that owns the GPU, marked `agg: 'mean'`.
 *
 * By default only this node's records are read (a dump folder on a shared filesystem holds every
 * node's files, and every node's collector reads it): `hosts: 'all'` reads all of them, for one
 * collector over a whole job's folder.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { type Static, Type } from '@sinclair/typebox';
import type { CollectiveEvent } from '../../schema/events.js';
import { InspectorJsonReader, type InspectorOp } from '../parsers/nccl_inspector.js';
import { type PromBucket, parseInspectorProm } from '../parsers/nccl_inspector_prom.js';
import type { ParseProblem } from '../parsers/problems.js';
import { RankMap } from '../ranks.js';
import { CollectiveReducer, REDUCER_DEFAULTS } from '../reduce.js';
import { type SourceDeps, type SourceFactory, sourceName } from '../source.js';
import { FileTail } from './tail.js';

const schema = Type.Object(
  {
    type: Type.Literal('nccl_inspector'),
    name: Type.Optional(Type.String({ description: 'distinguishes two sources of one type in counters' })),
    dir: Type.String({ description: 'the folder the plugin writes to (NCCL_INSPECTOR_DUMP_DIR)' }),
    hosts: Type.Union([Type.Literal('local'), Type.Literal('all')], {
      default: 'local',
      description: "whose records to read: this node's only (a shared folder), or every host's",
    }),
    from: Type.Union([Type.Literal('start'), Type.Literal('end')], {
      default: 'end',
      description:
        'files there when the collector starts: from their start, or only new lines (new files: from the start)',
    }),
    pollMs: Type.Integer({ minimum: 50, default: 500, description: 'how often files are read' }),
    scanMs: Type.Integer({
      minimum: 100,
      default: 2000,
      description: 'how often the folder is listed for new files',
    }),
    holdMs: Type.Integer({
      minimum: 0,
      default: REDUCER_DEFAULTS.holdMs,
      description: 'how long a record waits for its pid to be mapped (a hook step event, or its environment)',
    }),
    settleMs: Type.Integer({
      minimum: 0,
      default: REDUCER_DEFAULTS.settleMs,
      description:
        "how long after a step's end its records are still taken (at least the plugin's dump interval)",
    }),
    openEveryMs: Type.Integer({
      minimum: 1000,
      default: REDUCER_DEFAULTS.openEveryMs,
      description: 'a step running longer than this is sent as an open snapshot, again every this long',
    }),
    intervalMs: Type.Integer({
      minimum: 1000,
      default: REDUCER_DEFAULTS.intervalMs,
      description: 'reporting interval for ranks with no step boundaries (no hook)',
    }),
    maxHeld: Type.Integer({
      minimum: 1000,
      default: REDUCER_DEFAULTS.maxHeld,
      description: 'records held at most while they wait for a mapping or their step end',
    }),
  },
  { additionalProperties: false },
);

const JSON_FILE = /\.(log|jsonl)$/;
const PROM_FILE = /^nccl_inspector_metrics_.+\.prom$/;
const DUMP_NAME = /^(.+)-pid(\d+)\.(?:log|jsonl)$/;

interface JsonFile {
  reader: InspectorJsonReader;
  line: number;
}

interface PromFile {
  seen: string;
  seenAt: number;
  done: string;
}

export const ncclInspector: SourceFactory<typeof schema> = {
  type: 'nccl_inspector',
  description:
    'NCCL Inspector dumps (JSON v4.x, verbose or not; Prometheus textfiles): per-op collectives reduced per rank, step, communicator and op',
  schema,
  create(cfg, deps) {
    const intake = new InspectorIntake(cfg, deps);
    const { name, ranks } = intake;
    const mine = (host: string) => intake.mine(host);
    const drop = (reason: string, n: number, detail?: string) => deps.dropped?.(name, reason, n, detail);
    const problems = (path: string, ps: ParseProblem[]) => intake.problems(path, ps);
    const jsonFiles = new Map<string, FileTail>();
    const promFiles = new Map<string, PromFile>();
    /** Prometheus aggregates whose GPU has no rank yet (held like records). */
    let waiting: { b: PromBucket; ts: number; at: number }[] = [];
    let firstScan = true;
    let stopped = false;
    let scanTimer: NodeJS.Timeout | undefined;
    let tickTimer: NodeJS.Timeout | undefined;
    let running: Promise<void> | undefined;

    const follow = (path: string) => {
      const tail = new FileTail(
        { path, from: firstScan ? cfg.from : 'start', pollMs: cfg.pollMs },
        {
          onLines: (lines) => intake.lines(path, lines),
          onError: (err) => deps.sourceError(name, err),
          onNotice: (msg) => deps.logger.info(`${name}: ${msg}`),
          onReset: () => intake.reset(path),
          onLongLine: (bytes) =>
            deps.parseProblems(name, [
              { line: 0, reason: `line longer than the limit (${bytes} bytes), skipped`, raw: '' },
            ]),
        },
      );
      jsonFiles.set(path, tail);
      tail.start();
    };

    const unfollow = async (path: string, tail: FileTail) => {
      jsonFiles.delete(path);
      await tail.stop();
      intake.forget(path);
    };

    const scan = async () => {
      let names: string[];
      try {
        names = await readdir(cfg.dir);
      } catch (err) {
        deps.sourceError(
          name,
          new Error(
            `cannot list ${cfg.dir}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
          ),
        );
        return;
      }
      const present = new Set<string>();
      for (const n of names) {
        const path = join(cfg.dir, n);
        if (PROM_FILE.test(n)) {
          present.add(path);
          if (!promFiles.has(path)) promFiles.set(path, { seen: '', seenAt: 0, done: '' });
          continue;
        }
        if (!JSON_FILE.test(n)) continue;
        const m = DUMP_NAME.exec(n);
        if (m && !mine(m[1])) continue; // another node's file in a shared folder
        present.add(path);
        if (!jsonFiles.has(path)) follow(path);
      }
      for (const [path, f] of jsonFiles) if (!present.has(path)) await unfollow(path, f);
      for (const path of promFiles.keys()) if (!present.has(path)) promFiles.delete(path);
      firstScan = false;
    };

    /** A Prometheus file: read once per snapshot, after it has not changed for a poll. */
    const readProm = async (path: string, p: PromFile, now: number, atStop = false) => {
      const st = await stat(path).catch(() => undefined);
      if (!st) return;
      const key = `${st.ino}:${st.mtimeMs}:${st.size}`;
      if (key !== p.seen && !atStop) {
        p.seen = key;
        p.seenAt = now;
        return;
      }
      if (key === p.done || (!atStop && now - p.seenAt < cfg.pollMs)) return;
      p.done = key;
      let text: string;
      try {
        text = await readFile(path, 'utf8');
      } catch (err) {
        deps.sourceError(name, err);
        return;
      }
      const snap = parseInspectorProm(text);
      if (snap.problems.length) problems(path, snap.problems);
      for (const [k, n] of Object.entries(snap.ignored)) intake.ignore(k, n);
      for (const op of snap.ops) intake.add(op, now);
      const ts = Math.round(st.mtimeMs);
      for (const b of snap.buckets) {
        if (mine(b.host)) waiting.push({ b, ts, at: now });
        else intake.ignore('other_host');
      }
    };

    const sendBuckets = (now: number) => {
      const out: CollectiveEvent[] = [];
      const still: typeof waiting = [];
      for (const w of waiting) {
        const id = ranks.ownerOfGpu(w.b.host, w.b.gpu);
        if (id) out.push(bucketEvent(w.b, w.ts, id, cfg.intervalMs));
        else if (now - w.at < cfg.holdMs) still.push(w);
        else
          drop(
            'unmapped_pid',
            1,
            `${w.b.host} GPU${w.b.gpu}: no step event from this GPU (Prometheus records name no pid)`,
          );
      }
      waiting = still;
      if (out.length) deps.emit(out);
    };

    const tick = async () => {
      const now = deps.now();
      for (const [path, p] of promFiles) await readProm(path, p, now);
      if (waiting.length) sendBuckets(now);
      intake.tick(now);
    };

    const loop = (what: () => Promise<void>, every: number, set: (t: NodeJS.Timeout) => void) => {
      const run = () => {
        if (stopped) return;
        running = (running ?? Promise.resolve()).then(what).catch((err) => deps.sourceError(name, err));
        void running.finally(() => {
          if (!stopped) set(setTimeout(run, every));
        });
      };
      set(setTimeout(run, 0));
    };

    return {
      type: 'nccl_inspector',
      name,
      start: () => {
        loop(scan, cfg.scanMs, (t) => {
          scanTimer = t;
        });
        loop(tick, cfg.pollMs, (t) => {
          tickTimer = t;
        });
      },
      stop: async () => {
        stopped = true;
        clearTimeout(scanTimer);
        clearTimeout(tickTimer);
        await running;
        for (const [path, f] of [...jsonFiles]) await unfollow(path, f);
        const now = deps.now();
        for (const [path, p] of promFiles) await readProm(path, p, now, true);
        sendBuckets(Number.POSITIVE_INFINITY);
        intake.stop(now);
      },
    };
  },
};

type IntakeConfig = Pick<
  Static<typeof schema>,
  'hosts' | 'holdMs' | 'settleMs' | 'openEveryMs' | 'intervalMs' | 'maxHeld'
> & { name?: string };

/**
 * What the source does with dump lines, apart from following the files: parse each file's lines
 * in order, keep this node's records (or every host's), count what cannot be used, map and
 * reduce. The source feeds it from its file tails; `rankwatch eval --path inspector` feeds it the
 * simulator's dump files with event time for a clock.
 */
export class InspectorIntake {
  readonly name: string;
  readonly ranks: RankMap;
  readonly reducer: CollectiveReducer;
  private readonly files = new Map<string, JsonFile>();
  private readonly ignored: Record<string, number> = {};

  constructor(
    private readonly cfg: IntakeConfig,
    private readonly deps: SourceDeps,
  ) {
    this.name = sourceName('nccl_inspector', cfg.name);
    this.ranks = deps.ranks ?? new RankMap({ localHosts: [deps.host] });
    this.reducer = new CollectiveReducer({
      ranks: this.ranks,
      emit: (events) => deps.emit(events),
      drop: (reason, n, detail) => deps.dropped?.(this.name, reason, n, detail),
      holdMs: cfg.holdMs,
      settleMs: cfg.settleMs,
      openEveryMs: cfg.openEveryMs,
      intervalMs: cfg.intervalMs,
      maxStepMs: REDUCER_DEFAULTS.maxStepMs,
      maxHeld: cfg.maxHeld,
      now: deps.now,
    });
  }

  mine(host: string): boolean {
    return this.cfg.hosts === 'all' || this.ranks.isLocal(host);
  }

  /** New lines of one dump file, in order. */
  lines(path: string, lines: string[]): void {
    let f = this.files.get(path);
    if (!f) {
      f = { reader: new InspectorJsonReader(), line: 0 };
      this.files.set(path, f);
    }
    for (const line of lines) {
      const r = f.reader.push(line, ++f.line);
      if (r.problem) this.problems(path, [r.problem]);
      else if (r.ignored) this.ignore(r.ignored);
      else if (r.drops)
        this.deps.dropped?.(
          this.name,
          'inspector_ring_overflow',
          r.drops.dropped,
          `the plugin's ring buffer of ${r.drops.comm} overflowed between dumps (raise NCCL_INSPECTOR_DUMP_COLL_RING_SIZE or dump more often)`,
        );
      if (r.op) this.add(r.op, this.deps.now());
    }
  }

  /** An operation (from a dump line or a Prometheus file) into the reduction, when it is this node's. */
  add(op: InspectorOp, now: number): void {
    if (this.mine(op.host)) this.reducer.add(op, now);
    else this.ignore('other_host');
  }

  /** A file read again from its start (truncated, or a new one under its name): a dump cut short is reported. */
  reset(path: string): void {
    this.forget(path);
  }

  /** A file read to its end for the last time. */
  forget(path: string): void {
    const f = this.files.get(path);
    this.files.delete(path);
    const cut = f?.reader.finish() ?? [];
    if (cut.length) this.problems(path, cut);
  }

  ignore(what: string, n = 1): void {
    this.ignored[what] = (this.ignored[what] ?? 0) + n;
  }

  /** One counter for the source; the file named in each problem's reason. */
  problems(path: string, ps: ParseProblem[]): void {
    this.deps.parseProblems(
      this.name,
      ps.map((p) => ({ ...p, reason: `in ${basename(path)}: ${p.reason}` })),
    );
  }

  /** Moves the reduction on (steps and intervals due are sent) and reports what was ignored. */
  tick(now: number): void {
    this.reducer.tick(now);
    this.reportIgnored();
  }

  /** At stop: everything held is sent or dropped with its reason. */
  stop(now: number): void {
    for (const path of [...this.files.keys()]) this.forget(path);
    this.reducer.flush(now);
    this.reducer.close();
    this.reportIgnored();
  }

  private reportIgnored(): void {
    if (Object.keys(this.ignored).length === 0) return;
    this.deps.ignoredFields?.(this.name, { ...this.ignored });
    for (const k of Object.keys(this.ignored)) delete this.ignored[k];
  }
}

/** A v5 aggregate → an interval event of the GPU's rank: per-operation means, no count. */
function bucketEvent(
  b: PromBucket,
  ts: number,
  id: { job: string; rank: number; host: string },
  intervalMs: number,
) {
  const e: CollectiveEvent & Record<string, unknown> = {
    v: 1,
    kind: 'collective',
    ts,
    job: id.job,
    rank: id.rank,
    host: id.host,
    gpu: b.gpu,
    step: Math.floor(ts / intervalMs),
    op: b.op,
    comm: b.commName,
    comm_name: b.commName,
    nranks: b.nranks,
    bytes: b.bytesLow,
    dur_ms: Math.round(b.meanExecUs) / 1000,
    window: 'interval',
    interval_ms: intervalMs,
    agg: 'mean',
    size_bucket: b.sizeBucket,
  };
  if (b.busbwGbs > 0) e.busbw_gbs = b.busbwGbs;
  if (b.algoProto) e.algo_proto = b.algoProto;
  return e;
}
