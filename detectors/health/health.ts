/**
 * Node health, per host and per GPU, as a state machine over findings, checks and human calls:
 *
 *   healthy → suspect → cordoned → repairing → verifying → healthy
 *
 * - suspect: a finding about the unit that could be hardware (throttle, straggler, slow link,
 *   XID/ECC that asks for more than an app restart); back to healthy when all of them resolve.
 * - cordoned: triage asks for a cordon/drain/RMA, a throttle persists past `throttlePersistMs`,
 *   or straggler/slow-link findings name the host in `repeatJobs` different jobs within
 *   `repeatWindowMs`, or the GPU's uncorrectable ECC count rises (telemetry counters; corrected
 *   errors above `sbePerDay` make it a suspect).
 * - repairing / verifying: someone (or automation) says the repair started / ended.
 * - verifying → healthy only on evidence ingested after the repair: a passing nccl-tests run at
 *   `minBusbwRatio` of its expected bandwidth and a passing dcgm-diag or burn-in; a failing check
 *   sends the unit back to cordoned. Or an admin override, recorded with its author.
 * - a unit cordoned again within `reentryMs` of its last return needs a human to come back.
 * Pure: no I/O, no clock; every transition carries its reason, evidence (finding ids) and actor.
 * `snapshot()` / `restore()` carry the units across a restart (the repair loop stores them).
 */
import type { CheckEvent, GpuEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';

export type HealthState = 'healthy' | 'suspect' | 'cordoned' | 'repairing' | 'verifying';

export interface Transition {
  ts: number;
  host: string;
  gpu?: number;
  from: HealthState;
  to: HealthState;
  reason: string;
  /** Finding ids (and check descriptions) that justify the move. */
  evidence: string[];
  /** `rankwatch` for automatic moves; the person (token name) otherwise. */
  actor: string;
  /** The unit may not return without an admin override. */
  needs_human: boolean;
}

export interface HealthConfig {
  throttlePersistMs: number;
  repeatJobs: number;
  repeatWindowMs: number;
  reentryMs: number;
  minBusbwRatio: number;
  /** Corrected (single-bit) ECC errors per day on one GPU that make it a suspect. */
  sbePerDay: number;
}

export const HEALTH_DEFAULTS: HealthConfig = {
  throttlePersistMs: 30 * 60_000,
  repeatJobs: 3,
  repeatWindowMs: 7 * 86_400_000,
  reentryMs: 7 * 86_400_000,
  minBusbwRatio: 0.9,
  sbePerDay: 1_000,
};

const HARDWARE_ACTIONS = new Set(['cordon', 'drain', 'rma']);
const PERF_TYPES = new Set(['straggler', 'slow_link', 'nccl_slow_host']);
const SUSPECT_TYPES = new Set(['throttle', 'straggler', 'slow_link', 'nccl_slow_host', 'xid', 'ecc']);

/** What a unit is, whether held (Unit) or stored (UnitSnapshot). */
interface UnitFields {
  host: string;
  gpu?: number;
  state: HealthState;
  repairedTs?: number;
  ncclOk?: string;
  diagOk?: string;
  lastReturnTs?: number;
  needsHuman: boolean;
  /** When the unit entered its state, and why (the last transition's reason). */
  since?: number;
  reason?: string;
  /** The last check set aside while verifying because it was dated before the repair finished. */
  ignoredCheck?: string;
}

/** A unit as stored between runs (ECC baselines are not kept: the next samples start new ones). */
export interface UnitSnapshot extends UnitFields {
  open: Finding[];
  perfJobs: [string, { ts: number; id: string }][];
}

interface Unit extends UnitFields {
  /** Open findings that keep the unit from being healthy. */
  open: Map<string, Finding>;
  /** Jobs whose straggler/slow-link findings named this unit, with when. */
  perfJobs: Map<string, { ts: number; id: string }>;
  /** ECC counters: the day's baseline and the last reading. */
  ecc?: { fromTs: number; sbe0: number; dbe0: number; sbe: number; dbe: number };
}

export class NodeHealth {
  private readonly units = new Map<string, Unit>();

  constructor(private readonly cfg: HealthConfig = HEALTH_DEFAULTS) {}

  state(host: string, gpu?: number): HealthState {
    return this.units.get(key(host, gpu))?.state ?? 'healthy';
  }

  /** Every unit not healthy, for the cordon list, with since when and why. */
  unhealthy(): {
    host: string;
    gpu?: number;
    state: HealthState;
    needs_human: boolean;
    since?: number;
    reason?: string;
    ignored_check?: string;
  }[] {
    return [...this.units.values()]
      .filter((u) => u.state !== 'healthy')
      .map((u) => ({
        host: u.host,
        gpu: u.gpu,
        state: u.state,
        needs_human: u.needsHuman,
        since: u.since,
        reason: u.reason,
        ...(u.ignoredCheck ? { ignored_check: u.ignoredCheck } : {}),
      }));
  }

  /** Every unit with something to remember (not healthy, a past return, slow-job history). */
  snapshot(): UnitSnapshot[] {
    const out: UnitSnapshot[] = [];
    for (const u of this.units.values()) {
      if (u.state === 'healthy' && u.lastReturnTs === undefined && u.perfJobs.size === 0) continue;
      out.push({
        host: u.host,
        ...(u.gpu === undefined ? {} : { gpu: u.gpu }),
        state: u.state,
        open: [...u.open.values()],
        perfJobs: [...u.perfJobs],
        repairedTs: u.repairedTs,
        ncclOk: u.ncclOk,
        diagOk: u.diagOk,
        lastReturnTs: u.lastReturnTs,
        needsHuman: u.needsHuman,
        since: u.since,
        reason: u.reason,
        ignoredCheck: u.ignoredCheck,
      });
    }
    return out;
  }

  /** Units as a snapshot had them; replaces what this machine held. */
  restore(units: readonly UnitSnapshot[]): void {
    this.units.clear();
    for (const s of units) {
      const u = this.unit(s.host, s.gpu);
      u.state = s.state;
      u.open = new Map(s.open.map((f) => [f.id, f]));
      u.perfJobs = new Map(s.perfJobs);
      u.repairedTs = s.repairedTs;
      u.ncclOk = s.ncclOk;
      u.diagOk = s.diagOk;
      u.lastReturnTs = s.lastReturnTs;
      u.needsHuman = s.needsHuman;
      u.since = s.since;
      u.reason = s.reason;
      u.ignoredCheck = s.ignoredCheck;
    }
  }

  /**
   * The scheduler has the host out by rankwatch's hand while this machine thinks it healthy or
   * suspect (it was drained just before a crash): it is cordoned, so it can be repaired and returned.
   */
  adopt(host: string, ts: number, reason: string): Transition[] {
    const out: Transition[] = [];
    const u = this.unit(host);
    if (u.state === 'healthy' || u.state === 'suspect')
      this.move(u, 'cordoned', ts, reason, [], 'rankwatch', out);
    return out;
  }

  onFinding(f: Finding): Transition[] {
    if (!SUSPECT_TYPES.has(f.type) || !f.host) return [];
    const out: Transition[] = [];
    for (const u of this.unitsOf(f.host, f.gpu)) this.findingOn(u, f, out);
    return out;
  }

  /** Persistent throttling is judged on event time as it passes. */
  tick(now: number): Transition[] {
    const out: Transition[] = [];
    for (const u of this.units.values()) {
      if (u.state !== 'suspect') continue;
      for (const f of u.open.values()) {
        if (f.type === 'throttle' && now - (f.onset_ts ?? f.ts) >= this.cfg.throttlePersistMs) {
          const mins = Math.round(this.cfg.throttlePersistMs / 60_000);
          this.cordon(u, now, `throttled for ${mins} min or more`, [f.id], out);
          break;
        }
      }
    }
    return out;
  }

  /**
   * ECC trends from GPU telemetry counters: any rise of the uncorrectable count cordons; corrected
   * errors rising faster than `sbePerDay` make the GPU a suspect. A counter that drops (a reset
   * cleared the volatile counts) starts a new baseline.
   */
  onGpu(e: GpuEvent): Transition[] {
    if (e.ecc_sbe === undefined && e.ecc_dbe === undefined) return [];
    const u = this.unit(e.host, e.gpu);
    const sbe = e.ecc_sbe ?? 0;
    const dbe = e.ecc_dbe ?? 0;
    const c = u.ecc;
    if (!c || sbe < c.sbe || dbe < c.dbe || e.ts - c.fromTs > DAY) {
      u.ecc = { fromTs: e.ts, sbe0: sbe, dbe0: dbe, sbe, dbe };
      return [];
    }
    const out: Transition[] = [];
    const ev = `ecc ${e.host}/${e.gpu} at ${e.ts}`;
    if (dbe > c.dbe) {
      for (const x of this.unitsOf(e.host, e.gpu)) {
        if (x.state === 'healthy')
          this.move(x, 'suspect', e.ts, 'uncorrectable ECC errors', [ev], 'rankwatch', out);
        if (x.state === 'suspect')
          this.cordon(x, e.ts, `uncorrectable ECC count rose from ${c.dbe} to ${dbe}`, [ev], out);
      }
    } else if (sbe - c.sbe0 > this.cfg.sbePerDay && sbe > c.sbe) {
      for (const x of this.unitsOf(e.host, e.gpu))
        if (x.state === 'healthy')
          this.move(
            x,
            'suspect',
            e.ts,
            `${sbe - c.sbe0} corrected ECC errors within a day (limit ${this.cfg.sbePerDay})`,
            [ev],
            'rankwatch',
            out,
          );
    }
    c.sbe = sbe;
    c.dbe = dbe;
    return out;
  }

  /**
   * A check moves a verifying unit. One dated at or before the repair's end proves nothing: it is
   * set aside, said in `ignored` (one line per unit, for the log) and kept on the unit (the API).
   */
  onCheck(e: CheckEvent, ignored: string[] = []): Transition[] {
    const out: Transition[] = [];
    const hosts = e.hosts?.length ? e.hosts : [e.host];
    const what = `${e.tool} ${e.ok ? 'passed' : 'failed'} at ${e.ts}`;
    for (const host of hosts) {
      for (const u of this.unitsOf(host, e.gpu, true)) {
        if (u.state !== 'verifying' || u.repairedTs === undefined) continue;
        if (e.ts <= u.repairedTs) {
          u.ignoredCheck = `${e.tool} ${e.ok ? 'passed' : 'failed'} at ${iso(e.ts)}, dated before the repair finished at ${iso(u.repairedTs)}: ignored; only checks run after it count`;
          ignored.push(`${key(u.host, u.gpu)}: ${u.ignoredCheck}`);
          continue;
        }
        const ok = e.ok && this.bandwidthOk(e);
        if (!ok) {
          const why = e.ok
            ? `${e.tool} bus bandwidth ${e.busbw_gbs} GB/s is below ${this.cfg.minBusbwRatio} of the expected ${e.expected_gbs} GB/s`
            : `${e.tool} failed`;
          this.move(u, 'cordoned', e.ts, `verification failed: ${why}`, [what], 'rankwatch', out);
          continue;
        }
        if (e.tool === 'nccl-tests') u.ncclOk = what;
        else if (e.tool === 'dcgm-diag' || e.tool === 'burn-in') u.diagOk = what;
        if (u.ncclOk && u.diagOk) {
          if (u.needsHuman) continue; // a re-entry waits for a person even with good checks
          this.back(u, e.ts, 'verified after repair', [u.ncclOk, u.diagOk], 'rankwatch', out);
        }
      }
    }
    return out;
  }

  /** A person (or the cordon driver, once the node is drained) says the repair has started. */
  startRepair(host: string, ts: number, actor: string, gpu?: number): Transition[] {
    const out: Transition[] = [];
    for (const u of this.unitsOf(host, gpu, true))
      if (u.state === 'cordoned') this.move(u, 'repairing', ts, 'repair started', [], actor, out);
    return out;
  }

  /** The repair is done: from now on only checks ingested after `ts` count. */
  finishRepair(host: string, ts: number, actor: string, gpu?: number): Transition[] {
    const out: Transition[] = [];
    for (const u of this.unitsOf(host, gpu, true)) {
      if (u.state !== 'repairing' && u.state !== 'cordoned') continue;
      u.repairedTs = ts;
      u.ncclOk = undefined;
      u.diagOk = undefined;
      this.move(
        u,
        'verifying',
        ts,
        'repair finished; waiting for nccl-tests and a diagnostic',
        [],
        actor,
        out,
      );
    }
    return out;
  }

  /** An admin sets a unit's state by hand; the author is recorded. */
  override(
    host: string,
    to: HealthState,
    ts: number,
    author: string,
    reason: string,
    gpu?: number,
  ): Transition[] {
    const out: Transition[] = [];
    for (const u of this.unitsOf(host, gpu, true)) {
      if (to === 'healthy') this.back(u, ts, `admin override: ${reason}`, [], author, out);
      else this.move(u, to, ts, `admin override: ${reason}`, [], author, out);
    }
    return out;
  }

  private findingOn(u: Unit, f: Finding, out: Transition[]): void {
    if (f.state === 'resolved') {
      u.open.delete(f.id);
      if (u.state === 'suspect' && u.open.size === 0)
        this.move(u, 'healthy', f.ts, 'the findings that made it suspect resolved', [f.id], 'rankwatch', out);
      return;
    }
    // App faults and record-only Xids say nothing about the node.
    if ((f.type === 'xid' || f.type === 'ecc') && !HARDWARE_ACTIONS.has(f.action) && f.action !== 'watch')
      return;
    u.open.set(f.id, f);
    if (u.state === 'healthy')
      this.move(u, 'suspect', f.ts, `${f.type}: ${f.summary}`, [f.id], 'rankwatch', out);
    const hardware = (f.type === 'xid' || f.type === 'ecc') && HARDWARE_ACTIONS.has(f.action);
    // A fault while being verified: the repair did not hold.
    if (u.state === 'verifying' && hardware) {
      this.move(u, 'cordoned', f.ts, `${f.type} during verification: ${f.summary}`, [f.id], 'rankwatch', out);
      return;
    }
    if (u.state !== 'suspect') return;
    if (hardware) {
      this.cordon(u, f.ts, `${f.type} asks for ${f.action}: ${f.summary}`, [f.id], out);
      return;
    }
    if (PERF_TYPES.has(f.type) && f.job) {
      u.perfJobs.set(f.job, { ts: f.ts, id: f.id });
      for (const [j, v] of u.perfJobs) if (f.ts - v.ts > this.cfg.repeatWindowMs) u.perfJobs.delete(j);
      if (u.perfJobs.size >= this.cfg.repeatJobs) {
        const ids = [...u.perfJobs.values()].map((v) => v.id);
        this.cordon(u, f.ts, `slow in ${u.perfJobs.size} different jobs`, ids, out);
      }
    }
  }

  private cordon(u: Unit, ts: number, reason: string, evidence: string[], out: Transition[]): void {
    const reentry = u.lastReturnTs !== undefined && ts - u.lastReturnTs < this.cfg.reentryMs;
    if (reentry) u.needsHuman = true;
    const note = reentry ? '; back within 7 days of its last return: a person must clear it' : '';
    this.move(u, 'cordoned', ts, `${reason}${note}`, evidence, 'rankwatch', out);
  }

  private back(
    u: Unit,
    ts: number,
    reason: string,
    evidence: string[],
    actor: string,
    out: Transition[],
  ): void {
    u.lastReturnTs = ts;
    u.needsHuman = false;
    u.open.clear();
    u.perfJobs.clear();
    u.repairedTs = undefined;
    this.move(u, 'healthy', ts, reason, evidence, actor, out);
  }

  private move(
    u: Unit,
    to: HealthState,
    ts: number,
    reason: string,
    evidence: string[],
    actor: string,
    out: Transition[],
  ): void {
    if (u.state === to) return;
    out.push({
      ts,
      host: u.host,
      gpu: u.gpu,
      from: u.state,
      to,
      reason,
      evidence,
      actor,
      needs_human: u.needsHuman,
    });
    u.state = to;
    u.since = ts;
    u.reason = reason;
    u.ignoredCheck = undefined;
  }

  private bandwidthOk(e: CheckEvent): boolean {
    if (e.tool !== 'nccl-tests' || e.busbw_gbs === undefined || e.expected_gbs === undefined) return true;
    return e.busbw_gbs >= this.cfg.minBusbwRatio * e.expected_gbs;
  }

  /** The host's unit and, for a GPU, the GPU's; `all` adds every GPU unit of a host-wide event. */
  private unitsOf(host: string, gpu: number | undefined, all = false): Unit[] {
    const units = [this.unit(host)];
    if (gpu !== undefined) units.push(this.unit(host, gpu));
    else if (all)
      for (const u of this.units.values()) if (u.host === host && u.gpu !== undefined) units.push(u);
    return units;
  }

  private unit(host: string, gpu?: number): Unit {
    const k = key(host, gpu);
    let u = this.units.get(k);
    if (!u) {
      u = { host, gpu, state: 'healthy', open: new Map(), perfJobs: new Map(), needsHuman: false };
      this.units.set(k, u);
    }
    return u;
  }
}

const DAY = 86_400_000;
const key = (host: string, gpu?: number) => (gpu === undefined ? host : `${host}/${gpu}`);
const iso = (ts: number) => new Date(ts).toISOString();
