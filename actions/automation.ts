/**
 * The repair loop: findings and checks move node health (detectors/health); a host that becomes
 * cordoned is taken out through the cordon driver when the safety governor allows, and put back
 * when it is verified healthy, unless a person drained it. Every action and every refusal is an
 * audit entry with the finding and the actor. Never blocks the pipeline: driver calls run one at
 * a time on their own chain, with retries; a drain that keeps failing is audited as failed, never
 * assumed done.
 *
 * The functions a route or CLI calls with a person's name: approve, reject, resetBreaker,
 * overrideHealth, startRepair, finishRepair, cordonList.
 */
import { retry } from '../core/errors.js';
import {
  HEALTH_DEFAULTS,
  type HealthConfig,
  type HealthState,
  NodeHealth,
  type Transition,
} from '../detectors/health/health.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import type { InsertBatch } from '../store/rows.js';
import type { CordonDriver } from './drivers/driver.js';
import { type SafetyConfig, SafetyGovernor } from './governor.js';
import { type AuditEntry, auditRows, transitionRows } from './journal.js';

export interface AutomationOptions {
  /** Absent: decisions are made and audited as dry-run, nothing is touched. */
  driver?: CordonDriver;
  safety: SafetyConfig;
  health?: HealthConfig;
  /** Nodes in the fleet, for the budget's share (default: hosts seen in events so far). */
  fleetSize?: () => number;
  /** Wall clock (evidence age, audit times). */
  now?: () => number;
  /** Writes transitions and audit rows (the store's insert); failures are counted, not thrown. */
  record?: (batches: InsertBatch[]) => Promise<void>;
  attempts?: number;
  baseDelayMs?: number;
  /**
   * Hardware findings (XID, ECC) of a host that came back verified or by an admin: resolved here,
   * since no detector sees a fault "clear". Send them where findings go (store, alerts).
   */
  onResolved?: (fs: Finding[]) => void;
}

interface Pending {
  id: string;
  host: string;
  finding: Finding;
}

export interface CordonListEntry {
  host: string;
  state: HealthState;
  needs_human: boolean;
  out_by_rankwatch: boolean;
}

export class Automation {
  readonly health: NodeHealth;
  readonly governor: SafetyGovernor;
  /** Recent audit entries, newest last (the store has them all). */
  readonly audit: AuditEntry[] = [];
  private readonly findings = new Map<string, Finding>();
  private readonly jobHosts = new Map<string, Set<string>>();
  private readonly hosts = new Set<string>();
  private readonly pending = new Map<string, Pending>();
  private readonly rankwatchOut = new Set<string>();
  /** Hosts a dry-run would have taken out: they return (in the audit) like real ones. */
  private readonly dryOut = new Set<string>();
  private chain: Promise<void> = Promise.resolve();
  private readonly writes = new Set<Promise<void>>();
  private seq = 0;
  private readonly now: () => number;
  private recordErrors = 0;

  constructor(private readonly o: AutomationOptions) {
    this.health = new NodeHealth(o.health ?? HEALTH_DEFAULTS);
    this.governor = new SafetyGovernor(o.safety, o.fleetSize ?? (() => this.hosts.size));
    this.now = o.now ?? Date.now;
  }

  get driverType(): string {
    return this.o.driver?.type ?? 'none';
  }

  /** The pipeline's onFindings: returns at once. */
  onFindings = (fs: Finding[]): void => {
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
    const moves: Transition[] = [];
    let last = 0;
    for (const e of events) {
      last = Math.max(last, e.ts);
      if ('host' in e && typeof e.host === 'string') this.hosts.add(e.host);
      if (e.kind === 'check') moves.push(...this.health.onCheck(e));
      else if (e.kind === 'gpu') {
        if (e.ecc_dbe !== undefined || e.ecc_sbe !== undefined) moves.push(...this.health.onGpu(e));
      } else if (e.kind === 'step') {
        const hosts = this.jobHosts.get(e.job) ?? new Set<string>();
        if (hosts.size === 0) this.jobHosts.set(e.job, hosts);
        hosts.add(e.host);
      } else if (e.kind === 'job_event' && e.event === 'finished') this.jobHosts.delete(e.job);
    }
    if (last) moves.push(...this.health.tick(last));
    this.apply(moves);
  };

  approve(actionId: string, actor: string): Promise<AuditEntry> {
    return this.settle(actionId, actor, true);
  }

  reject(actionId: string, actor: string): Promise<AuditEntry> {
    return this.settle(actionId, actor, false);
  }

  resetBreaker(actor: string): AuditEntry {
    const was = this.governor.resetBreaker();
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

  /** Hosts not healthy, for GET /v1/cordon. */
  cordonList(): CordonListEntry[] {
    return this.health
      .unhealthy()
      .filter((u) => u.gpu === undefined)
      .map((u) => ({
        host: u.host,
        state: u.state,
        needs_human: u.needs_human,
        out_by_rankwatch: this.rankwatchOut.has(u.host),
      }));
  }

  /** A host seen in events, or one the health machine holds (for a 404 on unknown hosts). */
  knowsHost(host: string): boolean {
    return this.hosts.has(host) || this.health.unhealthy().some((u) => u.host === host);
  }

  pendingApprovals(): { id: string; host: string; finding_id: string }[] {
    return [...this.pending.values()].map((p) => ({ id: p.id, host: p.host, finding_id: p.finding.id }));
  }

  /** Resolves once every driver call queued so far has finished and its rows are written. */
  async idle(): Promise<void> {
    await this.chain;
    await Promise.all(this.writes);
  }

  stats(): Record<string, number | boolean> {
    return {
      nodes_out: this.governor.nodesOut().length,
      pending_approvals: this.pending.size,
      breaker_tripped: this.governor.tripped,
      record_errors: this.recordErrors,
    };
  }

  private apply(moves: Transition[]): void {
    if (moves.length === 0) return;
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
        summary: `${f.summary} Resolved: ${t.reason} (${t.actor}).`,
      });
    }
    if (done.length) this.o.onResolved?.(done);
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
    const hosts = f.job ? this.jobHosts.get(f.job)?.size : undefined;
    const d = this.governor.decideCordon({
      host: t.host,
      findingType: f.type,
      evidenceTs: f.ts,
      jobHosts: hosts,
      now: this.now(),
    });
    const id = `act-${this.now().toString(36)}-${++this.seq}`;
    if (d.tripped)
      this.log({
        id,
        host: t.host,
        verb: 'breaker_trip',
        outcome: 'done',
        reason: d.reason,
        finding_id: f.id,
        actor: 'rankwatch',
      });
    if (d.verdict === 'refused' || d.verdict === 'dry_run' || !this.o.driver) {
      const outcome = d.verdict === 'refused' ? 'refused' : 'dry_run';
      if (outcome === 'dry_run') this.dryOut.add(t.host);
      this.log({
        id,
        host: t.host,
        verb: 'cordon',
        outcome,
        reason: d.reason,
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
          return driver.cordon({ host, findingId: f.id, findingType: f.type, reason });
        },
        { attempts: this.o.attempts ?? 5, baseDelayMs: this.o.baseDelayMs ?? 1_000, jitter: true },
      );
      this.rankwatchOut.add(host);
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

  private log(
    e: Omit<AuditEntry, 'ts' | 'driver' | 'attempts' | 'id'> & { id?: string; attempts?: number },
  ): AuditEntry {
    const entry: AuditEntry = {
      ...e,
      ts: this.now(),
      id: e.id ?? `act-${this.now().toString(36)}-${++this.seq}`,
      driver: this.driverType,
      attempts: e.attempts ?? 0,
    };
    this.audit.push(entry);
    if (this.audit.length > 10_000) this.audit.splice(0, this.audit.length - 10_000);
    this.write([auditRows([entry])]);
    return entry;
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
