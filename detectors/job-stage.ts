/**
 * The runner of a job stage (`detect --stage job`, docs/operations.md "Capacity"): the job's
 * steps, job events, checkpoints and faults come keyed by job; its shards' records come from the
 * internal topic (`shardRecord`): collectives reduced per communicator and step, marks saying how
 * far each host group is complete, the GPU findings the shards raised, and the hang detector's
 * signs (detectors/hang/shard-signs.ts), handed to it in event-time order with the job's events
 * (`drainSigns`), the job judged at its signs' time (`signsTime`), and a stalled job's events
 * held until its signs reach them (`signsBehind`).
 *
 * The two inputs arrive in no fixed order, so a sharded job's events are held and released in
 * event-time order (held-events.ts) as the unsharded run would have seen them: a step event of step S goes to the
 * detectors once every host group of the job (its `job` event's `host_groups`, and any group that
 * sent a mark) is complete through S, right after the merged collectives of the steps up to S
 * (in a recorded stream a step's collectives come before its step events). The judge then sees
 * what it would have built from the raw records, so findings equal `replay`'s. A group that sends
 * nothing (its shard is down and not yet replaced) holds the job back for `holdMs` of wall time,
 * after which held events go on without it: late collectives are then judged as late ones are.
 *
 * The collectives' records are merged per step (slowlink/shard-merge.ts) and judged right
 * before the step's events are released.
 *
 * Held events are not out yet, so their bus messages must not be committed (docs/kafka.md, "A job
 * stage killed or moved"): the pipeline tells where each input was read (`position`), and
 * `heldFrom` gives the lowest offset held per `topic/partition`. A new owner replays what was
 * committed with its output dropped (`dropReplayed`), except what live input that replay releases
 * or judges: that was never out, so it comes with the next take.
 *
 * Not a detector: it reads the wall clock (`now`) for that bound, and only for it.
 */
import type { JobEvent, RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import type { DetectorOutput } from '../schema/output.js';
import { eventProblem } from '../schema/validate.js';
import type { DetectorConfig } from './detector.js';
import type { HangDetector } from './hang/hang.js';
import { QUIET_MS, type ShardSigns, SignsMirror } from './hang/shard-signs.js';
import { HeldEvents } from './held-events.js';
import { HANG } from './list.js';
import { DetectorRunner, type RunnerCounters } from './runner.js';
import { type ShardEvents, type ShardSteps, stepAt, stepRowOk, stepRows } from './shard-forward.js';
import { MergedCollectives } from './slowlink/shard-merge.js';
import {
  type ReducedEdges,
  SHARD_FORMAT,
  type ShardFinding,
  type ShardRecord,
  type ShardReduced,
} from './slowlink/shard-reduce.js';

export interface JobStageOptions {
  /** Longest a held event waits for a host group, in wall-clock ms (default 120 s). */
  holdMs?: number;
  now?: () => number;
  /**
   * Records of another format (`SHARD_FORMAT`) are refused: told here once per format and source
   * (the host group, `JOB/hostgroup-G`, or the job of a finding), and counted (`refusals()`).
   */
  onRefused?: (format: unknown, source: string) => void;
}

/** A sharded job's signs this far (event time) behind the stream have stopped, not lagged: the hang detector judges it on the stream's time. */
const SIGNS_LAG_MS = 30_000;

/** Sources of refused records told at most: a fleet of old shards is told, not listed whole. */
const MAX_TOLD = 1024;

interface ShardedJob {
  id: string;
  groups: Set<number>;
  through: Map<number, number>;
  /** The lowest `through` of `groups` (a group without a mark: -Infinity); undefined once either changed. */
  throughAll: number | undefined;
  /** Its collectives' records, merged per step until the step's events are released. */
  collectives: MergedCollectives;
  /**
   * Events held, given back in event-time order, each with when it was held and where it was
   * read: the job's own events on its topic, its steps on the shard records' (shard-forward.ts).
   */
  held: HeldEvents;
  /**
   * The hang detector's signs from the shards, in arrival order with when each came (wall clock),
   * until the job's events and every group's signs reach their time; each group's latest signs
   * time; what they said of the job's GPUs.
   */
  signs: ShardSigns[];
  signsAt: number[];
  /** The earliest event time among them (every event handed over asks: most find none due). */
  signsMin: number;
  signsClock: Map<number, number>;
  mirror: SignsMirror;
  /** When (wall clock) the latest signs came. */
  signsCameAt: number;
  /** Event time of the job's last restart or finish handed over: signs before it tell of the run it ended. */
  endedAt: number;
  /** The latest `job` event read here, and the latest a shard had read before steps it sent: they wait for it. */
  jobAt: number;
  needsJobAt: number;
}

export class JobStageRunner extends DetectorRunner {
  private readonly sharded = new Map<string, ShardedJob>();
  /** Open throttle incidents the shards reported, by `host/gpu`: what a straggler links to. */
  private readonly throttles = new Map<string, string>();
  private membersUnknown = 0;
  /** Rows or events shards passed on that were not valid events (shard-forward.ts): dropped. */
  private malformedSteps = 0;
  private readonly holdMs: number;
  private readonly now: () => number;
  private readonly onRefused?: (format: unknown, source: string) => void;
  /** Records refused for their format, when (wall clock) the first and the latest came (read with `refusals()`). */
  private readonly refused = { records: 0, since: 0, at: 0 };
  /** The (format, source) pairs told. */
  private readonly told = new Set<string>();
  /** When (wall clock) held events were last looked at for `holdMs` at a take. */
  private sweptAt = 0;
  /** The latest event time of any input (events, and records that carry one). */
  private inputTs = 0;
  /** Event time of the latest event handed to the detectors, or of the idle bus. */
  private clock = 0;
  /** Where what is pushed now was read, and whether it is replayed (a new owner's rebuild). */
  private at = { from: '', offset: 0 };
  private replaying = false;
  /** Records pushed live (events carry it in their heap): what they judge comes out even during a replay. */
  private readonly live = new WeakSet<object>();
  /** Output of live input released during a replay, for the next take; `keeping` while it runs. */
  private kept: DetectorOutput[] = [];
  private keeping = false;
  /** The hang detector, which the shards' signs feed. */
  private readonly hang: HangDetector | undefined;

  constructor(config: Partial<DetectorConfig> = {}, o: JobStageOptions = {}) {
    // Every detector: jobs not sharded send their GPU samples here, by job; a sharded job's never come.
    super(config);
    this.holdMs = o.holdMs ?? 120_000;
    this.now = o.now ?? Date.now;
    this.onRefused = o.onRefused;
    this.hang = this.fleetDetector(HANG)?.detector;
    this.hang?.judgeBy((job) => this.signsTime(job));
    // Nor is a sharded job quiet while its groups' shards are behind the other jobs' time.
    this.judgeQuietBy((job) => this.signsTime(job));
  }

  /**
   * How far a sharded job's hang, and whether it went quiet, are judged: as far as every group's signs came, not past the
   * job's first held event or its first signs not handed over yet. A job whose signs stopped (its
   * GPUs went silent, or its shards sent none for `holdMs`) is judged on the stream's time, as
   * without them, once the stream is `SIGNS_LAG_MS` past them and nothing of it is held.
   */
  private signsTime(job: string): number | undefined {
    const s = this.sharded.get(job);
    if (!s || s.signsClock.size === 0) return undefined;
    let t = Number.POSITIVE_INFINITY;
    for (const g of s.signsClock.values()) if (g < t) t = g;
    if (s.signs.length > 0 && s.signsMin < t) t = s.signsMin;
    const first = s.held.topTs();
    const held = first !== undefined;
    if (held && first < t) t = first;
    const stopped = this.clock - t >= SIGNS_LAG_MS || this.now() - s.signsCameAt >= this.holdMs;
    return !held && s.signs.length === 0 && stopped ? undefined : t;
  }

  override push(e: RankwatchEvent): void {
    this.came(e.ts);
    const job = (e as { job?: string }).job;
    if (e.kind === 'job') this.announce(e);
    const s = job === undefined ? undefined : this.sharded.get(job);
    if (!s) {
      if (e.ts > this.clock) this.clock = e.ts;
      super.push(e);
    } else if (s.held.size === 0 && !this.waits(s, e.kind, e.kind === 'step' ? e.step : Number.NaN, e.ts))
      this.pass(s, e, !this.replaying);
    else {
      s.held.push(e, this.now(), this.at.from, this.at.offset, !this.replaying);
      this.release(s);
    }
  }

  /** The input pushed next was read at `offset` of `topic/partition`; replayed: a committed stretch. */
  position(topic: string, partition: number, offset: number, replayed: boolean): void {
    this.at = { from: `${topic}/${partition}`, offset };
    this.replaying = replayed;
  }

  /** Per `topic/partition`, the lowest offset whose events are held: commits stop there. */
  heldFrom(): Map<string, number> {
    const from = new Map<string, number>();
    for (const s of this.sharded.values()) s.held.lowestOffsets(from);
    return from;
  }

  /** The output of replayed input, dropped; what live input it released stays for the next take. */
  dropReplayed(): void {
    super.take();
    this.replaying = false;
  }

  override take(): DetectorOutput {
    this.releaseOverdue();
    const o = super.take();
    if (this.kept.length === 0) return o;
    const parts = [...this.kept, o];
    this.kept = [];
    return {
      findings: parts.flatMap((p) => p.findings),
      mfu: parts.flatMap((p) => p.mfu),
      rollups: parts.flatMap((p) => p.rollups),
      slowGpus: parts.flatMap((p) => p.slowGpus ?? []),
    };
  }

  /**
   * Work on live input. During a replay its output is set aside for the next take instead of being
   * dropped with the replay's: a live event released by a replayed mark, or a live record judged
   * with a replayed step, was never out.
   */
  private keep(live: boolean, work: () => void): void {
    if (!this.replaying || !live || this.keeping) {
      work();
      return;
    }
    super.take(); // what replayed input produced so far: dropped, as the rest of the replay's
    this.keeping = true;
    try {
      work();
    } finally {
      this.keeping = false;
    }
    this.kept.push(super.take());
  }

  /** The latest event time of any input, records included. */
  inputTime(): number {
    return this.inputTs;
  }

  /** Input of event time `ts` came. */
  private came(ts: number): void {
    if (ts > this.inputTs) this.inputTs = ts;
  }

  /** An event a shard passed on: checked as the pipeline checks what it reads (a record could be tampered with). */
  private passedOn(e: unknown): void {
    if (eventProblem(e) === undefined && (e as { job?: unknown }).job !== undefined)
      this.push(e as RankwatchEvent);
    else this.malformedSteps++;
  }

  /**
   * A steps record's rows, as their events would be pushed: held as rows of the record
   * (held-events.ts), made events when handed over. Malformed rows are counted and dropped.
   */
  private pushRows(s: ShardedJob, r: ShardSteps): void {
    const n = stepRows(r);
    const at = this.now();
    for (let i = 0; i < n; i++) {
      if (!stepRowOk(r, i)) {
        this.malformedSteps++;
        continue;
      }
      const ts = r.ts[i];
      this.came(ts);
      if (s.held.size === 0 && !this.waits(s, 'step', r.step[i], ts))
        this.pass(s, stepAt(r, i), !this.replaying);
      else {
        s.held.pushRow(r, i, at, this.at.from, this.at.offset, !this.replaying);
        this.release(s);
      }
    }
  }

  /** A record from a shard (the internal topic): a reduced collective, a mark or a GPU finding. */
  shardRecord(value: unknown): void {
    const r = value as ShardRecord | ShardFinding | ShardSigns | ShardSteps | ShardEvents;
    if (typeof (r as { ts?: unknown })?.ts === 'number') this.came((r as { ts: number }).ts);
    // Read in another format, a record would be judged wrong without a word: refused, and said.
    if (r?.format !== SHARD_FORMAT) {
      this.refuse(value);
      return;
    }
    if (r.t === 'finding') {
      this.adopt(r.finding);
      return;
    }
    if (r.t === 'steps' || r.t === 'events') {
      // The job is sharded (its groups' events come here), its `job` event possibly not yet read.
      const s = this.shardedJob(r.job);
      if (typeof r.job_ts === 'number' && r.job_ts > s.needsJobAt) s.needsJobAt = r.job_ts;
      if (r.t === 'steps') this.pushRows(s, r);
      else for (const e of r.events) this.passedOn(e);
      return;
    }
    const s = this.shardedJob(r.job);
    if (r.t === 'signs') {
      s.signs.push(r);
      s.signsCameAt = this.now();
      s.signsAt.push(s.signsCameAt);
      if (r.ts < s.signsMin) s.signsMin = r.ts;
      if (r.ts > (s.signsClock.get(r.group) ?? Number.NEGATIVE_INFINITY)) s.signsClock.set(r.group, r.ts);
      this.drainSigns(s, this.signsBound(s));
      this.release(s);
      return;
    }
    if (r.t === 'mark') {
      this.addGroup(s, r.group);
      if (r.through > (s.through.get(r.group) ?? Number.NEGATIVE_INFINITY)) {
        s.through.set(r.group, r.through);
        s.throughAll = undefined;
      }
      this.release(s);
      return;
    }
    if (r.t !== 'reduced' && r.t !== 'edges') return;
    this.addGroup(s, r.group);
    s.collectives.add(r, !this.replaying);
  }

  /** Records refused for their format: how many, when (wall clock) the first and the latest came. */
  refusals(): Readonly<{ records: number; since: number; at: number }> {
    return this.refused;
  }

  private refuse(value: unknown): void {
    const refused = this.refused;
    refused.records++;
    refused.at = this.now();
    if (refused.since === 0) refused.since = refused.at;
    const r = (typeof value === 'object' && value !== null ? value : {}) as Record<string, unknown>;
    const format = 'format' in r ? r.format : 'none';
    const job = typeof r.job === 'string' ? r.job : '?';
    const source = typeof r.group === 'number' ? `${job}/hostgroup-${r.group}` : job;
    const key = `${String(format)} ${source}`;
    if (this.told.has(key) || this.told.size >= MAX_TOLD) return;
    this.told.add(key);
    this.onRefused?.(format, source);
  }

  override flush(): void {
    this.releaseAll();
    super.flush();
  }

  override endOfInput(): void {
    this.releaseAll();
    super.endOfInput();
  }

  /**
   * An idle bus: events held past `holdMs` go on without the groups that did not report. Event
   * time moves on only up to the oldest event still held: the detectors have not seen it, and a
   * job whose shards are behind (or restarting) would go quiet here while its steps wait.
   */
  override advance(now: number): void {
    const wall = this.now();
    if (now > this.clock) this.clock = now;
    let upTo = now;
    for (const s of this.sharded.values()) {
      this.releaseWaited(s, wall);
      this.release(s);
      this.drainSigns(s, this.signsBound(s));
      const first = s.held.topTs();
      if (first !== undefined && first < upTo) upTo = first;
    }
    super.advance(upTo);
  }

  /**
   * On a busy bus (other jobs' input keeps coming, so no idle advance), held events past `holdMs`
   * still go on without the groups that did not report: looked for once a second of wall time, at
   * a take (one per delivery).
   */
  private releaseOverdue(): void {
    const wall = this.now();
    if (wall - this.sweptAt < 1_000) return;
    this.sweptAt = wall;
    for (const s of this.sharded.values()) {
      if (!this.releaseWaited(s, wall)) continue;
      this.release(s);
      this.drainSigns(s, this.signsBound(s));
    }
  }

  override forget(job: string): void {
    this.sharded.delete(job);
    super.forget(job);
  }

  override stats(): RunnerCounters & { collectives_members_unknown: number; shard_steps_malformed: number } {
    return {
      ...super.stats(),
      collectives_members_unknown: this.membersUnknown,
      shard_steps_malformed: this.malformedSteps,
    };
  }

  protected override throttleIncident(host: string, gpu: number): string | undefined {
    return this.throttles.get(`${host}/${gpu}`) ?? super.throttleIncident(host, gpu);
  }

  /** A job event that names host groups makes the job sharded: its events wait for them. */
  private announce(e: JobEvent): void {
    const n = (e as { host_groups?: number }).host_groups;
    const known = this.sharded.get(e.job);
    if (known && e.ts > known.jobAt) known.jobAt = e.ts;
    if (n === undefined) return;
    const s = this.shardedJob(e.job);
    if (e.ts > s.jobAt) s.jobAt = e.ts;
    for (let g = 0; g < n; g++) this.addGroup(s, g);
  }

  private shardedJob(id: string): ShardedJob {
    let s = this.sharded.get(id);
    if (!s) {
      s = {
        id,
        groups: new Set(),
        through: new Map(),
        throughAll: undefined,
        collectives: new MergedCollectives({
          live: this.live,
          judge: (r, live) => this.judge(r, live),
          unknown: () => this.membersUnknown++,
        }),
        held: new HeldEvents(),
        signs: [],
        signsAt: [],
        signsMin: Number.POSITIVE_INFINITY,
        signsClock: new Map(),
        mirror: new SignsMirror(),
        signsCameAt: 0,
        endedAt: Number.NEGATIVE_INFINITY,
        jobAt: Number.NEGATIVE_INFINITY,
        needsJobAt: Number.NEGATIVE_INFINITY,
      };
      this.sharded.set(id, s);
    }
    return s;
  }

  private addGroup(s: ShardedJob, g: number): void {
    if (s.groups.has(g)) return;
    s.groups.add(g);
    s.throughAll = undefined;
  }

  /** How far every group of the job is complete (asked per held step: kept until a mark or a group changes it). */
  private completeThrough(s: ShardedJob): number {
    if (s.throughAll === undefined) {
      let low = Number.POSITIVE_INFINITY;
      for (const g of s.groups) low = Math.min(low, s.through.get(g) ?? Number.NEGATIVE_INFINITY);
      s.throughAll = low;
    }
    return s.throughAll;
  }

  /**
   * Whether an event (its kind, step if a step, and time) must wait: a step until the job event
   * its shard had read came here and every group of its job is complete through it; any event of
   * a job gone quiet until its signs reach the event's time (`signsBehind`).
   */
  private waits(s: ShardedJob, kind: RankwatchEvent['kind'], step: number, ts: number): boolean {
    if (kind !== 'job' && s.jobAt < s.needsJobAt) return true;
    if (kind === 'step' && this.completeThrough(s) < step) return true;
    return this.signsBehind(s, kind, ts);
  }

  /**
   * A job whose collectives went quiet (a stall the hang detector judges) by an event's time: its
   * signs up to that time go to the hang detector first, as replay sees the GPU samples and
   * collectives before it. Else a restart or finish (or the peers' watchdog timeouts) passing
   * signs that lag (a shard's idle flush marked the hung step complete) would end the hang there,
   * and the signs before it would then build a second view of the job and open the hang again.
   * A job moving on is not held (its signs trail its steps by a second), nor one whose signs
   * stopped (as `signsTime` tells).
   */
  private signsBehind(s: ShardedJob, kind: RankwatchEvent['kind'], ts: number): boolean {
    if (kind === 'step') {
      if (s.signsClock.size === 0) return false;
      const p = this.hang?.progressOf(s.id, false);
      if (!p || ts - p.maxTs < QUIET_MS) return false;
    }
    // The job's own events wait for the shards' steps of before them, whose progress their signs
    // tell (a group's signs of second T follow its steps read before T); none yet: every group is
    // behind (held at most `holdMs`, as every held event). A group that never sent any (no GPU of
    // it reports) is not waited for.
    if (s.signsClock.size === 0) return true;
    let t = Number.POSITIVE_INFINITY;
    for (const g of s.signsClock.values()) if (g < t) t = g;
    if (t >= ts) return false;
    return this.clock - t < SIGNS_LAG_MS && this.now() - s.signsCameAt < this.holdMs;
  }

  private release(s: ShardedJob): void {
    const held = s.held;
    while (held.size > 0 && !this.waits(s, held.topKind(), held.topStep(), held.topTs()!))
      this.releaseHead(s);
  }

  private releaseAll(): void {
    for (const s of this.sharded.values()) {
      for (let ts = s.held.topTs(); ts !== undefined; ts = s.held.topTs()) {
        this.drainSigns(s, ts, true);
        this.releaseHead(s);
      }
      this.drainSigns(s, Number.POSITIVE_INFINITY, true);
      s.collectives.applyThrough(Number.POSITIVE_INFINITY);
    }
  }

  private releaseHead(s: ShardedJob): void {
    const e = s.held.pop();
    this.pass(s, e, s.held.poppedLive);
  }

  /**
   * Held events that waited `holdMs` go on without the groups they wait for, with every event
   * before them in event time; true if any did.
   */
  private releaseWaited(s: ShardedJob, wall: number): boolean {
    let any = false;
    for (
      let at = s.held.oldestArrival();
      at !== undefined && wall - at >= this.holdMs;
      at = s.held.oldestArrival()
    ) {
      this.releaseHead(s);
      any = true;
    }
    return any;
  }

  /** An event to the detectors (`live`: read live, not replayed); no closure per event unless a replay runs. */
  private pass(s: ShardedJob, e: RankwatchEvent, live: boolean): void {
    if (this.replaying && live && !this.keeping) this.keep(true, () => this.hand(s, e));
    else this.hand(s, e);
  }

  /** A step's after the merged collectives of its step and those before. */
  private hand(s: ShardedJob, e: RankwatchEvent): void {
    this.drainSigns(s, e.ts);
    if (e.kind === 'step') s.collectives.applyThrough(e.step);
    if (e.ts > this.clock) this.clock = e.ts;
    if (e.kind === 'job_event' && (e.event === 'restart' || e.event === 'finished')) s.endedAt = e.ts;
    super.push(e);
  }

  /** How far the job's signs may go now: the events handed over (of any job, or the idle bus), not past the job's first held one. */
  private signsBound(s: ShardedJob): number {
    const first = s.held.topTs();
    return first !== undefined ? Math.min(this.clock, first) : this.clock;
  }

  /**
   * The job's signs up to event time `bound` go to the hang detector, oldest first, as its GPU
   * samples and collectives would have: no further than every group's signs went (a group behind
   * would look silent), unless `all` (end of input) or they waited past `holdMs` (a group whose
   * shard is down).
   */
  private drainSigns(s: ShardedJob, bound: number, all = false): void {
    if (s.signs.length === 0) return;
    if (!all && s.signsMin > bound && this.now() - s.signsAt[0] < this.holdMs) return;
    let limit = bound;
    if (!all) for (const t of s.signsClock.values()) if (t < limit) limit = t;
    const wall = this.now();
    const due: ShardSigns[] = [];
    let k = 0;
    let min = Number.POSITIVE_INFINITY;
    for (let i = 0; i < s.signs.length; i++) {
      const r = s.signs[i];
      if (r.ts <= limit || wall - s.signsAt[i] >= this.holdMs) due.push(r);
      else {
        if (r.ts < min) min = r.ts;
        s.signs[k] = r;
        s.signsAt[k++] = s.signsAt[i];
      }
    }
    if (due.length === 0) return;
    s.signs.length = k;
    s.signsAt.length = k;
    s.signsMin = min;
    const hang = this.hang;
    if (!hang) return;
    const before = this.out.findings.length;
    for (const r of due.sort((a, b) => a.ts - b.ts)) {
      // Late past the hold, signs of before a restart or finish are kept (later ones send changes
      // only) but neither written nor judged: the hang detector ended that run, they would start it over.
      const ended = r.ts < s.endedAt;
      s.mirror.apply(r, (make) => (ended ? undefined : hang.progressOf(r.job, make)));
      if (!ended) hang.advanceJob(r.job, r.ts);
    }
    if (this.out.findings.length > before) this.link(before);
  }

  private judge(r: ShardReduced | ReducedEdges[], live: boolean): void {
    this.keep(live, () => {
      const before = this.out.findings.length;
      if (Array.isArray(r)) for (const x of r) this.toJobReduced(x);
      else this.toJobReduced(r);
      if (this.out.findings.length > before) this.link(before);
    });
  }

  /** A shard's GPU finding: known here for the links, not emitted again (the shard stored it). */
  private adopt(f: Finding): void {
    if (f.type !== 'throttle' || f.gpu === undefined) return;
    const key = `${f.host}/${f.gpu}`;
    if (f.state === 'resolved') {
      if (this.throttles.get(key) === f.id) this.throttles.delete(key);
      return;
    }
    const fresh = !this.throttles.has(key);
    this.throttles.set(key, f.id);
    if (fresh) {
      const before = this.out.findings.length;
      this.linkThrottle({ ...f });
      if (this.out.findings.length > before) this.link(before);
    }
  }
}
