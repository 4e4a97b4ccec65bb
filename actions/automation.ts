/**
 * The repair loop: findings and checks move node health (detectors/health); a host that becomes
 * cordoned is taken out through the cordon driver when the safety governor allows, and put back
 * when it is verified healthy, unless a person drained it. Every action and every refusal is an
 * audit entry with the finding and the actor, and one log line. Never blocks the pipeline: driver
 * calls run one at a time on their own chain, with retries; a drain that keeps failing is audited
 * as failed, never assumed done.
 *
 * Durable: with a journal (actions/state.ts), every change is written to the store, and
 * `takeOver()` reads it back and reconciles it with the scheduler's own list (nodes out with
 * rankwatch's mark) before the first decision, so a restart keeps nodes out, the budget's
 * windows, the breaker and pending approvals, and a node drained by rankwatch stays repairable.
 * Until `takeOver()` (a process that does not hold the leader lease) it decides nothing.
 *
 * The functions a route or CLI calls with a person's name: approve, reject, resetBreaker,
 * overrideHealth, startRepair, finishRepair, cordonList.
 */
import { retry } from '../core/errors.js';
import type { Logger } from '../core/log.js';
import {
  HEALTH_DEFAULTS,
  type HealthConfig,
  type HealthState,
  NodeHealth,
  type Transition,
} from '../detectors/health/health.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import type { AutomationBudget } from '../schema/output.js';
import type { InsertBatch } from '../store/rows.js';
import type { CordonDriver, ListedNode } from './drivers/driver.js';
import { describeLimit, type Limit, type SafetyConfig, SafetyGovernor } from './governor.js';
import { type AuditEntry, auditRows, transitionRows } from './journal.js';
import { reconcilePlan } from './reconcile.js';
import type { AutomationSnapshot, OutRecord, PendingApproval, StateJournal } from './state.js';
import { breakerFinding, logDecision } from './visible.js';

export interface AutomationOptions {
  /** Absent: decisions are made and audited as dry-run, nothing is touched. */
  driver?: CordonDriver;
  safety: SafetyConfig;
  health?: HealthConfig;
  /**
   * Nodes in the fleet, for the budget's share (`--fleet-size`); default: the scheduler's node
   * count when there is a driver, else hosts seen in events so far.
   */
  fleetSize?: () => number;
  /** Wall clock (evidence age, audit times). */
  now?: () => number;
  /** Writes transitions and audit rows (the store's insert); failures are counted, not thrown. */
  record?: (batches: InsertBatch[]) => Promise<void>;
  attempts?: number;
  baseDelayMs?: number;
  /**
   * Findings the repair loop makes itself; send them where findings go (store, alerts): hardware
   * findings (XID, ECC) of a host that came back verified or by an admin, resolved here since no
   * detector sees a fault "clear"; and the breaker's own (`cordon_breaker`), open while it is
   * tripped, so a trip alerts through the same routes.
   */
  publish?: (fs: Finding[]) => void;
  /** One line per decision (cordon, refusal and the limit that refused, breaker trip and reset). */
  logger?: Logger;
  /** Keeps the state in the store; with one, nothing is decided before `takeOver()`. */
  journal?: StateJournal;
  /** Asked before each scheduler call: does this process still hold the leader lease? */
  mayAct?: () => boolean;
}

export type Mode = 'dry_run' | 'act' | 'approval';

export interface CordonListEntry {
  host: string;
  /** The node's state in rankwatch's health machine (not what its open findings ask for). */
  state: HealthState;
  needs_human: boolean;
  /** The scheduler has it out by rankwatch's hand. */
  out_by_rankwatch: boolean;
  /** A dry-run took it out on paper. */
  dry_run_out: boolean;
  /** A cordon of it waits for a person's approval. */
  pending_approval: boolean;
  /** When it entered its state, and why. */
  since?: number;
  reason?: string;
  /** Verifying: the last check set aside because it was dated before the repair finished. */
  ignored_check?: string;
}

/** What `takeOver()` found and did, for the start-up line. */
export interface TakeOverReport {
  restored: boolean;
  /** Nodes the scheduler has out by rankwatch's hand that the stored state did not know. */
  adopted: string[];
  /** Nodes the state had out that the scheduler has back, or a person holds now. */
  released: string[];
  /** Drains decided before a crash that the scheduler never did. */
  interrupted: string[];
}

export class Automation {
  readonly health: NodeHealth;
  readonly governor: SafetyGovernor;
  /** Recent audit entries, newest last (the store has them all). */
  readonly audit: AuditEntry[] = [];
  private readonly findings = new Map<string, Finding>();
  private readonly jobHosts = new Map<string, Set<string>>();
  /** Host counts of jobs whose steps this loop does not see (fed from the store). */
  private readonly jobHostCounts = new Map<string, number>();
  private readonly hosts = new Set<string>();
  private readonly pending = new Map<string, PendingApproval>();
  private readonly rankwatchOut = new Map<string, OutRecord>();
  /** Hosts a dry-run would have taken out: they return (in the audit) like real ones. */
  private readonly dryOut = new Map<string, OutRecord>();
  private chain: Promise<void> = Promise.resolve();
  private readonly writes = new Set<Promise<void>>();
  private seq = 0;
  private readonly now: () => number;
  private recordErrors = 0;
  /** Decisions since start, by `verb outcome`. */
  private readonly decisions = new Map<string, number>();
  /** The scheduler's node count, read at takeover. */
  private schedulerFleet: number | undefined;
  private ignored = 0;
  /** Hosts the store has seen lately (a loop fed from the store sees few events itself). */
  private seenFleet = 0;
  /** Deciding: without a journal from the start; with one, once `takeOver()` has run. */
  active: boolean;
  /** The store feed's cursor, kept in the snapshot (actions/store-feed.ts). */
  feedCursor: unknown;

  constructor(private readonly o: AutomationOptions) {
    this.health = new NodeHealth(o.health ?? HEALTH_DEFAULTS);
    this.governor = new SafetyGovernor(
      o.safety,
      o.fleetSize ?? (() => this.schedulerFleet ?? Math.max(this.hosts.size, this.seenFleet)),
    );
    this.now = o.now ?? Date.now;
    this.active = o.journal === undefined;
  }

  get driverType(): string {
    return this.o.driver?.type ?? 'none';
  }

  /** dry_run unless enabled with a driver; approval when every cordon waits for a person. */
  get mode(): Mode {
    if (!this.governor.cfg.enabled || !this.o.driver) return 'dry_run';
    return this.governor.cfg.approval ? 'approval' : 'act';
  }

  /** The start-up line: mode, driver, budget, breaker, and what the state holds. */
  describe(): string {
    const c = this.governor.cfg;
    const b = this.governor.budget();
    const fleet = this.o.fleetSize
      ? 'the fleet (--fleet-size)'
      : this.schedulerFleet !== undefined
        ? `the ${this.driverType} fleet`
        : 'hosts seen so far';
    const trip = this.governor.trip();
    const mode = {
      dry_run: 'dry-run (decisions audited, nothing touched)',
      act: 'act',
      approval: 'act after approval',
    }[this.mode];
    return [
      `repair loop: ${mode} · driver: ${this.driverType}`,
      `budget: ${b.nodes} node(s) out at once (${describeLimit(c, b)}; ${b.fleet} in ${fleet}), ${c.perHour} cordon(s) per hour`,
      `breaker: ${c.breakerBurst} requests in ${Math.round(c.breakerWindowMs / 60_000)} min${trip ? ` (TRIPPED since ${new Date(trip.at).toISOString()}: ${trip.reason})` : ''}`,
      `out: ${this.rankwatchOut.size} by rankwatch${this.dryOut.size ? `, ${this.dryOut.size} on paper (dry-run)` : ''}, ${this.pending.size} waiting for approval`,
    ].join(' · ');
  }

  /** The pipeline's onFindings: returns at once. */
  onFindings = (fs: Finding[]): void => {
    if (!this.active) {
      this.ignored += fs.length;
      return;
    }
    const moves: Transition[] = [];
    for (const f of fs) {
      if (f.state === 'resolved') this.findings.delete(f.id);
      else this.findings.set(f.id, f);
      moves.push(...this.health.onFinding(f));
    }
    this.apply(moves);
  };

  /** The pipeline's onEvents: checks verify repaired nodes; steps say how many hosts a job has. */
  onEvents = (events: RankwatchEvent[]): void => {
    if (!this.active) return;
    const moves: Transition[] = [];
    let last = 0;
    const known = this.hosts.size;
    for (const e of events) {
      last = Math.max(last, e.ts);
      if ('host' in e && typeof e.host === 'string') this.hosts.add(e.host);
      if (e.kind === 'check') {
        const ignored: string[] = [];
        moves.push(...this.health.onCheck(e, ignored));
        for (const line of ignored) this.o.logger?.warn({ host: e.host, tool: e.tool }, `check ${line}`);
      } else if (e.kind === 'gpu') {
        if (e.ecc_dbe !== undefined || e.ecc_sbe !== undefined) moves.push(...this.health.onGpu(e));
      } else if (e.kind === 'step') {
        const hosts = this.jobHosts.get(e.job) ?? new Set<string>();
        if (hosts.size === 0) this.jobHosts.set(e.job, hosts);
        hosts.add(e.host);
      } else if (e.kind === 'job_event' && e.event === 'finished') this.jobHosts.delete(e.job);
    }
    if (last) moves.push(...this.health.tick(last));
    this.apply(moves);
    if (this.hosts.size !== known) this.persist();
  };

  /** A job's host count, when the loop is fed from the store rather than the job's steps. */
  noteJobHosts(job: string, hosts: number): void {
    this.jobHostCounts.set(job, hosts);
  }

  /** Hosts the store saw lately: the fleet when neither --fleet-size nor a scheduler says. */
  noteFleetSeen(hosts: number): void {
    this.seenFleet = hosts;
  }

  /** Event time passes without events (a loop fed from the store): persistent throttling is judged. */
  tick(ts: number): void {
    if (this.active) this.apply(this.health.tick(ts));
  }

  approve(actionId: string, actor: string): Promise<AuditEntry> {
    return this.settle(actionId, actor, true);
  }

  reject(actionId: string, actor: string): Promise<AuditEntry> {
    return this.settle(actionId, actor, false);
  }

  resetBreaker(actor: string): AuditEntry {
    const trip = this.governor.trip();
    const was = this.governor.resetBreaker();
    if (trip) this.publishBreaker(trip, 'resolved', actor);
    return this.log({
      host: '',
      verb: 'breaker_reset',
      outcome: 'done',
      reason: was ? 'breaker reset' : 'breaker was not tripped',
      finding_id: '',
      actor,
    });
  }

  overrideHealth(host: string, to: HealthState, actor: string, reason: string, gpu?: number): Transition[] {
    const moves = this.health.override(host, to, this.now(), actor, reason, gpu);
    this.apply(moves);
    return moves;
  }

  startRepair(host: string, actor: string): Transition[] {
    const moves = this.health.startRepair(host, this.now(), actor);
    this.apply(moves);
    return moves;
  }

  finishRepair(host: string, actor: string): Transition[] {
    const moves = this.health.finishRepair(host, this.now(), actor);
    this.apply(moves);
    return moves;
  }

  /** Hosts not healthy, and hosts out by rankwatch's hand, for GET /v1/actions. */
  cordonList(): CordonListEntry[] {
    const pending = new Set([...this.pending.values()].map((p) => p.host));
    const rows = this.health
      .unhealthy()
      .filter((u) => u.gpu === undefined)
      .map((u) => ({
        host: u.host,
        state: u.state,
        needs_human: u.needs_human,
        out_by_rankwatch: this.rankwatchOut.has(u.host),
        dry_run_out: this.dryOut.has(u.host),
        pending_approval: pending.has(u.host),
        since: u.since,
        reason: u.reason,
        ...(u.ignored_check ? { ignored_check: u.ignored_check } : {}),
      }));
    // Out by rankwatch yet healthy in health (returned by an override while the resume failed).
    for (const r of this.rankwatchOut.values())
      if (!rows.some((x) => x.host === r.host))
        rows.push({
          host: r.host,
          state: this.health.state(r.host),
          needs_human: false,
          out_by_rankwatch: true,
          dry_run_out: false,
          pending_approval: pending.has(r.host),
          since: r.since,
          reason: `out by rankwatch (${r.type} ${r.finding_id})`,
        });
    return rows;
  }

  /** A host seen in events, or one the health machine holds (for a 404 on unknown hosts). */
  knowsHost(host: string): boolean {
    return this.hosts.has(host) || this.health.unhealthy().some((u) => u.host === host);
  }

  pendingApprovals(): { id: string; host: string; finding_id: string }[] {
    return [...this.pending.values()].map((p) => ({ id: p.id, host: p.host, finding_id: p.finding.id }));
  }

  /** Resolves once every driver call queued so far has finished and its rows and state are written. */
  async idle(): Promise<void> {
    await this.chain;
    await Promise.all(this.writes);
    await this.o.journal?.flushed();
  }

  stats(): Record<string, number | boolean | string> {
    const b = this.governor.budget();
    return {
      mode: this.mode,
      active: this.active,
      nodes_out: this.rankwatchOut.size,
      nodes_out_dry_run: this.dryOut.size,
      budget_nodes: b.nodes,
      fleet: b.fleet,
      cordons_last_hour: this.governor.cordonsInHour(this.now()),
      pending_approvals: this.pending.size,
      breaker_tripped: this.governor.tripped,
      record_errors: this.recordErrors,
      state_write_errors: this.o.journal?.errors ?? 0,
      inputs_ignored: this.ignored,
    };
  }

  /** The budget and the breaker now, in figures (GET /v1/actions, the page's automation panel). */
  budgetNow(): AutomationBudget {
    const c = this.governor.cfg;
    const b = this.governor.budget();
    const trip = this.governor.trip();
    return {
      nodes_out: this.mode === 'dry_run' ? this.dryOut.size : this.rankwatchOut.size,
      nodes_limit: b.nodes,
      limit_by: describeLimit(c, b),
      fleet: b.fleet,
      cordons_last_hour: this.governor.cordonsInHour(this.now()),
      per_hour: c.perHour ?? null,
      breaker_burst: c.breakerBurst,
      breaker_window_s: Math.round(c.breakerWindowMs / 1000),
      breaker_tripped_at: trip?.at ?? null,
      breaker_reason: trip?.reason ?? null,
    };
  }

  /** Decisions since start, by verb and outcome (for /metrics). */
  decisionCounts(): { verb: string; outcome: string; n: number }[] {
    return [...this.decisions].map(([k, n]) => {
      const [verb, outcome] = k.split(' ');
      return { verb, outcome, n };
    });
  }

  /** Nodes out now, by who (rankwatch, or dry_run on paper) and the finding type that took them out. */
  nodesOutByReason(): { by: string; reason: string; n: number }[] {
    const count = new Map<string, number>();
    for (const [by, m] of [
      ['rankwatch', this.rankwatchOut],
      ['dry_run', this.dryOut],
    ] as const)
      for (const r of m.values()) count.set(`${by} ${r.type}`, (count.get(`${by} ${r.type}`) ?? 0) + 1);
    return [...count].map(([k, n]) => {
      const [by, reason] = k.split(' ');
      return { by, reason, n };
    });
  }

  /** Hosts per health state (healthy ones are not counted), for /metrics. */
  nodesByState(): Record<string, number> {
    const n: Record<string, number> = { suspect: 0, cordoned: 0, repairing: 0, verifying: 0 };
    for (const u of this.health.unhealthy()) if (u.gpu === undefined) n[u.state]++;
    return n;
  }

  /** The whole state, as the journal stores it. */
  snapshot(): AutomationSnapshot {
    const keep = new Set<string>();
    const health = this.health.snapshot();
    for (const u of health) for (const f of u.open) keep.add(f.id);
    return {
      v: 1,
      health,
      governor: this.governor.snapshot(),
      out: [...this.rankwatchOut.values()],
      dryOut: [...this.dryOut.values()],
      pending: [...this.pending.values()],
      findings: [...this.findings.values()].filter(
        (f) => keep.has(f.id) || f.type === 'xid' || f.type === 'ecc',
      ),
      hosts: [...this.hosts],
      ...(this.feedCursor === undefined ? {} : { feed: this.feedCursor }),
    };
  }

  restore(s: AutomationSnapshot): void {
    this.health.restore(s.health);
    this.governor.restore(s.governor);
    this.rankwatchOut.clear();
    for (const r of s.out) this.rankwatchOut.set(r.host, r);
    this.dryOut.clear();
    for (const r of s.dryOut) this.dryOut.set(r.host, r);
    this.pending.clear();
    for (const p of s.pending) this.pending.set(p.id, p);
    this.findings.clear();
    for (const f of s.findings) this.findings.set(f.id, f);
    for (const h of s.hosts) this.hosts.add(h);
    this.feedCursor = s.feed;
  }

  /**
   * Becomes the acting repair loop under lease `epoch`: reads the stored state, reconciles it with
   * the scheduler, then decides. Throws when the store or the scheduler cannot be read (the caller
   * retries: deciding on a state not read back could take out more than the budget).
   */
  async takeOver(epoch: number): Promise<TakeOverReport> {
    const j = this.o.journal;
    let restored = false;
    if (j) {
      const stored = await j.load();
      if (stored) {
        this.restore(stored.state);
        restored = true;
      }
      j.epoch = epoch;
    }
    const report: TakeOverReport = { restored, adopted: [], released: [], interrupted: [] };
    if (this.o.driver) await this.reconcile(await this.o.driver.nodes(), report);
    if (this.mode === 'act' || this.mode === 'approval') {
      // What a dry-run took out on paper was never out: it must not use the real budget.
      for (const h of this.dryOut.keys()) this.governor.returned(h);
      this.dryOut.clear();
    }
    this.active = true;
    const trip = this.governor.trip();
    if (trip) this.publishBreaker(trip, 'open', 'rankwatch');
    this.persist();
    return report;
  }

  /** Another process leads now (or this one stops): decide nothing until the next takeOver(). */
  standDown(): void {
    this.active = false;
  }

  /** Re-reads the scheduler's node count (the fleet the share is of). */
  async refreshFleet(): Promise<void> {
    if (this.o.driver) this.schedulerFleet = (await this.o.driver.nodes()).length || undefined;
  }

  /** Brings the state in line with the scheduler's list (the truth about who is out). */
  private async reconcile(nodes: ListedNode[], report: TakeOverReport): Promise<void> {
    this.schedulerFleet = nodes.length || undefined;
    const now = this.now();
    const plan = reconcilePlan(
      nodes,
      {
        out: new Set(this.rankwatchOut.keys()),
        counted: this.governor.nodesOut(),
        notInScheduler: new Set([...this.dryOut.keys(), ...[...this.pending.values()].map((p) => p.host)]),
      },
      this.driverType,
    );
    const note = (host: string, why: string) =>
      this.log({ host, verb: 'reconcile', outcome: 'done', reason: why, finding_id: '', actor: 'rankwatch' });
    for (const { host, why } of plan.adopt) {
      this.rankwatchOut.set(host, { host, type: 'scheduler', finding_id: '', since: now });
      this.governor.knownOut(host, now);
      // Recorded, not applied: the node is out already, no decision is due.
      const moves = this.health.adopt(host, now, why);
      if (moves.length) this.write([transitionRows(moves)]);
      report.adopted.push(host);
      note(host, why);
    }
    for (const { host, why } of plan.release) {
      this.rankwatchOut.delete(host);
      this.governor.returned(host);
      report.released.push(host);
      note(host, why);
    }
    for (const host of plan.interrupted) {
      this.governor.returned(host);
      report.interrupted.push(host);
      this.log({
        host,
        verb: 'cordon',
        outcome: 'failed',
        reason:
          'interrupted by a restart before the scheduler confirmed it; the node stays cordoned in health for a person',
        finding_id: '',
        actor: 'rankwatch',
      });
    }
  }

  private apply(moves: Transition[]): void {
    if (moves.length === 0) return;
    this.persist();
    this.write([transitionRows(moves)]);
    for (const t of moves) {
      if (t.gpu !== undefined) continue; // schedulers take hosts out, not GPUs
      if (t.to === 'cordoned' && t.from !== 'repairing' && t.from !== 'verifying') this.cordon(t);
      else if (t.to === 'healthy' && (this.rankwatchOut.has(t.host) || this.dryOut.has(t.host)))
        this.uncordon(t);
      if (t.to === 'healthy' && t.from !== 'suspect') this.resolveHardware(t);
    }
  }

  private resolveHardware(t: Transition): void {
    const done: Finding[] = [];
    for (const f of this.findings.values()) {
      if (f.host !== t.host || (f.type !== 'xid' && f.type !== 'ecc')) continue;
      this.findings.delete(f.id);
      done.push({
        ...f,
        state: 'resolved',
        ts: t.ts,
        resolution: `${t.reason} (${t.actor}).`,
      });
    }
    if (done.length) this.o.publish?.(done);
  }

  private cordon(t: Transition): void {
    const finding = t.evidence.map((id) => this.findings.get(id)).find((f) => f !== undefined);
    const f: Finding = finding ?? {
      id: t.evidence[0] ?? '',
      ts: t.ts,
      type: 'health',
      state: 'open',
      host: t.host,
      severity: 'warning',
      evidence: {},
      action: 'cordon',
      summary: t.reason,
    };
    const hosts = f.job ? (this.jobHosts.get(f.job)?.size ?? this.jobHostCounts.get(f.job)) : undefined;
    const d = this.governor.decideCordon({
      host: t.host,
      findingType: f.type,
      evidenceTs: f.ts,
      jobHosts: hosts,
      now: this.now(),
    });
    const id = `act-${this.now().toString(36)}-${++this.seq}`;
    if (d.tripped) {
      this.log({
        id,
        host: t.host,
        verb: 'breaker_trip',
        outcome: this.mode === 'dry_run' ? 'dry_run' : 'done',
        reason: d.reason,
        finding_id: f.id,
        actor: 'rankwatch',
      });
      const trip = this.governor.trip();
      if (trip) this.publishBreaker(trip, 'open', 'rankwatch');
    }
    if (d.verdict === 'refused' || d.verdict === 'dry_run' || !this.o.driver) {
      const outcome = d.verdict === 'refused' ? 'refused' : 'dry_run';
      if (outcome === 'dry_run')
        this.dryOut.set(t.host, { host: t.host, type: f.type, finding_id: f.id, since: this.now() });
      this.log({
        id,
        host: t.host,
        verb: 'cordon',
        outcome,
        reason: d.reason,
        limit: d.limit,
        finding_id: f.id,
        actor: 'rankwatch',
      });
      return;
    }
    if (d.verdict === 'pending_approval') {
      this.pending.set(id, { id, host: t.host, finding: f });
      this.log({
        id,
        host: t.host,
        verb: 'cordon',
        outcome: 'pending_approval',
        reason: d.reason,
        finding_id: f.id,
        actor: 'rankwatch',
      });
      return;
    }
    this.enqueue(() => this.drain(id, t.host, f, 'rankwatch'));
  }

  private async settle(actionId: string, actor: string, approved: boolean): Promise<AuditEntry> {
    const p = this.pending.get(actionId);
    if (!p)
      return this.log({
        id: actionId,
        host: '',
        verb: 'cordon',
        outcome: 'refused',
        reason: 'no such pending action',
        finding_id: '',
        actor,
      });
    this.pending.delete(actionId);
    this.governor.settle(p.host, approved);
    if (!approved)
      return this.log({
        id: actionId,
        host: p.host,
        verb: 'cordon',
        outcome: 'refused',
        reason: 'rejected by a person',
        finding_id: p.finding.id,
        actor,
      });
    let entry: AuditEntry | undefined;
    this.enqueue(async () => {
      entry = await this.drain(actionId, p.host, p.finding, actor);
    });
    await this.chain;
    return entry as AuditEntry;
  }

  private async drain(id: string, host: string, f: Finding, actor: string): Promise<AuditEntry> {
    const driver = this.o.driver as CordonDriver;
    let attempts = 0;
    try {
      this.mustLead();
      const before = await driver.state(host);
      if (before.out && !before.byRankwatch) {
        // A person took it out already: leave it theirs (and never resume it later).
        return this.log({
          id,
          host,
          verb: 'cordon',
          outcome: 'refused',
          reason: `already out by a person (${before.reason ?? 'no reason'})`,
          finding_id: f.id,
          actor,
        });
      }
      const reason = `${f.type} ${f.id}: ${f.summary}`;
      await retry(
        () => {
          attempts++;
          this.mustLead();
          return driver.cordon({ host, findingId: f.id, findingType: f.type, reason });
        },
        { attempts: this.o.attempts ?? 5, baseDelayMs: this.o.baseDelayMs ?? 1_000, jitter: true },
      );
      this.rankwatchOut.set(host, { host, type: f.type, finding_id: f.id, since: this.now() });
      return this.log({
        id,
        host,
        verb: 'cordon',
        outcome: 'done',
        reason: f.summary,
        finding_id: f.id,
        actor,
        attempts,
      });
    } catch (err) {
      this.governor.returned(host);
      return this.log({
        id,
        host,
        verb: 'cordon',
        outcome: 'failed',
        reason: (err as Error).message,
        finding_id: f.id,
        actor,
        attempts,
      });
    }
  }

  private uncordon(t: Transition): void {
    const id = `act-${this.now().toString(36)}-${++this.seq}`;
    const finding = t.evidence[0] ?? '';
    if (this.dryOut.delete(t.host) || !this.o.driver) {
      this.rankwatchOut.delete(t.host);
      this.governor.returned(t.host);
      this.log({
        id,
        host: t.host,
        verb: 'uncordon',
        outcome: 'dry_run',
        reason: t.reason,
        finding_id: finding,
        actor: t.actor,
      });
      return;
    }
    const driver = this.o.driver;
    this.enqueue(async () => {
      let attempts = 0;
      try {
        this.mustLead();
        const s = await driver.state(t.host);
        if (s.out && !s.byRankwatch) {
          this.rankwatchOut.delete(t.host);
          this.log({
            id,
            host: t.host,
            verb: 'uncordon',
            outcome: 'refused',
            reason: `a person drained it (${s.reason ?? 'no reason'}): left drained`,
            finding_id: finding,
            actor: t.actor,
          });
          return;
        }
        if (s.out)
          await retry(
            () => {
              attempts++;
              this.mustLead();
              return driver.uncordon(t.host);
            },
            { attempts: this.o.attempts ?? 5, baseDelayMs: this.o.baseDelayMs ?? 1_000, jitter: true },
          );
        this.rankwatchOut.delete(t.host);
        this.governor.returned(t.host);
        this.log({
          id,
          host: t.host,
          verb: 'uncordon',
          outcome: 'done',
          reason: t.reason,
          finding_id: finding,
          actor: t.actor,
          attempts,
        });
      } catch (err) {
        this.log({
          id,
          host: t.host,
          verb: 'uncordon',
          outcome: 'failed',
          reason: (err as Error).message,
          finding_id: finding,
          actor: t.actor,
          attempts,
        });
      }
    });
  }

  private enqueue(job: () => Promise<unknown>): void {
    this.chain = this.chain.then(job).then(
      () => undefined,
      () => undefined,
    );
  }

  /** Throws unless this process may still act (it holds the leader lease). */
  private mustLead(): void {
    if (this.o.mayAct && !this.o.mayAct())
      throw new Error(
        'this process no longer holds the repair loop lease: not acting (the new leader reconciles with the scheduler)',
      );
  }

  /** The breaker's finding, open while tripped (the same id, so alerts and the store see one incident). */
  private publishBreaker(
    trip: { at: number; reason: string },
    state: 'open' | 'resolved',
    actor: string,
  ): void {
    const o = { actor, now: this.now(), mode: this.mode, driver: this.driverType };
    this.o.publish?.([breakerFinding(trip, state, o)]);
  }

  private log(
    e: Omit<AuditEntry, 'ts' | 'driver' | 'attempts' | 'id'> & {
      id?: string;
      attempts?: number;
      limit?: Limit;
    },
  ): AuditEntry {
    const { limit, ...rest } = e;
    const entry: AuditEntry = {
      ...rest,
      ts: this.now(),
      id: e.id ?? `act-${this.now().toString(36)}-${++this.seq}`,
      driver: this.driverType,
      attempts: e.attempts ?? 0,
    };
    this.audit.push(entry);
    if (this.audit.length > 10_000) this.audit.splice(0, this.audit.length - 10_000);
    const key = `${entry.verb} ${entry.outcome}`;
    this.decisions.set(key, (this.decisions.get(key) ?? 0) + 1);
    if (this.o.logger) logDecision(this.o.logger, entry, limit);
    this.write([auditRows([entry])]);
    this.persist();
    return entry;
  }

  /** Writes the state (coalesced; returns at once). */
  private persist(): void {
    if (this.active) this.o.journal?.save(() => this.snapshot());
  }

  private write(batches: InsertBatch[]): void {
    if (!this.o.record) return;
    const w = this.o.record(batches).then(
      () => undefined,
      () => {
        this.recordErrors++;
      },
    );
    this.writes.add(w);
    void w.finally(() => this.writes.delete(w));
  }
}
