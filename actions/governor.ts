/**
 * The safety governor: decides whether a cordon may happen, so that a bad detector or a storm of
 * findings cannot take the fleet down. Pure (time is passed in). On by default:
 * - dry-run unless `enabled`;
 * - a fleet budget: at most `maxShare` of the fleet and at most `maxNodes` nodes out at once, and
 *   at most `perHour` cordons in any hour. The share never rounds a fleet's limit below one node:
 *   `maxNodes` is at least 1, so automation that is on has been allowed one node out, and a share
 *   of a small fleet that rounds to 0 would make it refuse everything without saying why (5% of 16
 *   hosts). The share lowers the limit only where it allows one node or more;
 * - a breaker: `breakerBurst` cordon requests within `breakerWindowMs` trip it; tripped, it
 *   refuses every cordon until an admin resets it, yet verified nodes still return;
 * - never on evidence older than `maxEvidenceAgeMs`, nor on a job-relative finding (straggler,
 *   slow link) from a job with fewer than `minJobHosts` hosts to compare;
 * - `approval`: every cordon waits for a person.
 * Returning a node is never refused by budget or breaker: only a person's drain keeps it out.
 * Its whole state (nodes out, the hour's cordons, the breaker's window and trip) is a snapshot
 * the repair loop stores and restores across restarts (actions/state.ts).
 */
import { RankwatchError } from '../core/errors.js';

export interface SafetyConfig {
  enabled: boolean;
  approval: boolean;
  maxShare?: number;
  maxNodes?: number;
  perHour?: number;
  breakerBurst: number;
  breakerWindowMs: number;
  maxEvidenceAgeMs: number;
  minJobHosts: number;
}

export const SAFETY_DEFAULTS: SafetyConfig = {
  enabled: false,
  approval: false,
  maxShare: 0.05,
  maxNodes: 4,
  perHour: 4,
  breakerBurst: 10,
  breakerWindowMs: 10 * 60_000,
  maxEvidenceAgeMs: 15 * 60_000,
  minJobHosts: 4,
};

const FLAG = { maxShare: '--cordon-max-share', maxNodes: '--cordon-max-nodes', perHour: '--cordon-per-hour' };

/** Every problem with a safety config, each naming its key; automation without a budget is one. */
export function safetyProblems(c: Partial<SafetyConfig>): string[] {
  const p: string[] = [];
  const missing = (['maxShare', 'maxNodes', 'perHour'] as const).filter((k) => c[k] === undefined);
  if (c.enabled && missing.length)
    p.push(`enabled without a budget: set ${missing.map((k) => `${k} (${FLAG[k]})`).join(', ')}`);
  if (c.maxShare !== undefined && !(c.maxShare > 0 && c.maxShare < 1))
    p.push('maxShare: a share between 0 and 1');
  for (const k of ['maxNodes', 'perHour', 'breakerBurst', 'minJobHosts'] as const) {
    const v = c[k];
    if (v !== undefined && !(Number.isInteger(v) && v >= 1)) p.push(`${k}: a whole number of at least 1`);
  }
  return p;
}

/** The config as given over the defaults; refuses (one line per problem) what cannot be safe. */
export function safetyConfig(given: Partial<SafetyConfig>): SafetyConfig {
  // With automation on, the budget must be the operator's own choice, not a default they never saw.
  const base = given.enabled
    ? { ...SAFETY_DEFAULTS, maxShare: undefined, maxNodes: undefined, perHour: undefined }
    : SAFETY_DEFAULTS;
  const c = { ...base, ...given };
  const p = safetyProblems(c);
  if (p.length) throw new RankwatchError('RANKWATCH_ERR_CONFIG', `cordon automation: ${p.join('; ')}`);
  return c as SafetyConfig;
}

export interface CordonAsk {
  host: string;
  findingType: string;
  /** Event time of the newest evidence. */
  evidenceTs: number;
  /** Hosts of the job the finding came from (job-relative findings only). */
  jobHosts?: number;
  now: number;
}

export type Verdict = 'execute' | 'dry_run' | 'pending_approval' | 'refused';

/** What refused a cordon: one of the limits above, or a node already out. */
export type Limit =
  | 'already_out'
  | 'breaker'
  | 'evidence_age'
  | 'job_hosts'
  | 'max_nodes'
  | 'max_share'
  | 'per_hour';

export interface Decision {
  verdict: Verdict;
  reason: string;
  /** The limit that refused (refusals only). */
  limit?: Limit;
}

/** The governor's state, as stored between runs. */
export interface GovernorSnapshot {
  out: string[];
  reserved: string[];
  /** Wall-clock times of the cordons of the last hour. */
  cordons: number[];
  /** Wall-clock times of the cordon requests in the breaker's window. */
  asks: number[];
  trippedAt?: number;
  tripReason?: string;
}

/** The fleet budget now: how many nodes may be out, and which setting decides it. */
export interface Budget {
  fleet: number;
  nodes: number;
  by: 'max_nodes' | 'max_share';
  /** The share rounded a small fleet's limit down to 0 and one node is allowed instead. */
  floored: boolean;
}

const JOB_RELATIVE = new Set(['straggler', 'slow_link', 'nccl_slow_host']);

export class SafetyGovernor {
  private readonly out = new Set<string>();
  private readonly reserved = new Set<string>();
  private cordons: number[] = [];
  private asks: number[] = [];
  private trippedAt: number | undefined;
  private tripReason: string | undefined;

  constructor(
    readonly cfg: SafetyConfig,
    private readonly fleetSize: () => number,
  ) {}

  get tripped(): boolean {
    return this.trippedAt !== undefined;
  }

  /** When and why the breaker tripped; undefined while it is not. */
  trip(): { at: number; reason: string } | undefined {
    return this.trippedAt === undefined ? undefined : { at: this.trippedAt, reason: this.tripReason ?? '' };
  }

  /** The node limit for the fleet as it is now (see the header: never below one node). */
  budget(): Budget {
    const fleet = Math.max(1, this.fleetSize());
    const maxNodes = this.cfg.maxNodes ?? 0;
    const share = Math.floor((this.cfg.maxShare ?? 0) * fleet);
    const byShare = Math.max(1, share);
    return byShare < maxNodes
      ? { fleet, nodes: byShare, by: 'max_share', floored: share < 1 }
      : { fleet, nodes: maxNodes, by: 'max_nodes', floored: false };
  }

  /** Cordons counted in the hour before `now`. */
  cordonsInHour(now: number): number {
    return this.cordons.filter((t) => now - t < 3_600_000).length;
  }

  snapshot(): GovernorSnapshot {
    return {
      out: [...this.out],
      reserved: [...this.reserved],
      cordons: [...this.cordons],
      asks: [...this.asks],
      ...(this.trippedAt === undefined ? {} : { trippedAt: this.trippedAt, tripReason: this.tripReason }),
    };
  }

  restore(s: GovernorSnapshot): void {
    this.out.clear();
    this.reserved.clear();
    for (const h of s.out) this.out.add(h);
    for (const h of s.reserved) this.reserved.add(h);
    this.cordons = [...s.cordons];
    this.asks = [...s.asks];
    this.trippedAt = s.trippedAt;
    this.tripReason = s.tripReason;
  }

  /** Is `host` counted against the budget (out, or reserved for an approval)? */
  counts(host: string): boolean {
    return this.out.has(host) || this.reserved.has(host);
  }

  nodesOut(): string[] {
    return [...this.out, ...this.reserved];
  }

  /**
   * A node found out by rankwatch's hand at start that the stored state did not know (it was drained
   * just before a crash): it counts against the budget, and as a cordon of this hour.
   */
  knownOut(host: string, now: number): void {
    if (this.out.has(host)) return;
    this.out.add(host);
    this.cordons.push(now);
  }

  decideCordon(a: CordonAsk): Decision & { tripped?: boolean } {
    if (this.out.has(a.host) || this.reserved.has(a.host))
      return { verdict: 'refused', reason: 'already out', limit: 'already_out' };
    this.asks = this.asks.filter((t) => a.now - t < this.cfg.breakerWindowMs);
    this.asks.push(a.now);
    if (this.trippedAt !== undefined)
      return { verdict: 'refused', reason: 'breaker tripped: an admin must reset it', limit: 'breaker' };
    const age = a.now - a.evidenceTs;
    if (age > this.cfg.maxEvidenceAgeMs)
      return {
        verdict: 'refused',
        limit: 'evidence_age',
        reason: `evidence is ${Math.round(age / 60_000)} min old (limit ${Math.round(this.cfg.maxEvidenceAgeMs / 60_000)})`,
      };
    if (JOB_RELATIVE.has(a.findingType) && (a.jobHosts ?? 0) < this.cfg.minJobHosts)
      return {
        verdict: 'refused',
        limit: 'job_hosts',
        reason: `the job has ${a.jobHosts ?? 'an unknown number of'} hosts, fewer than ${this.cfg.minJobHosts} to compare`,
      };
    if (this.asks.length >= this.cfg.breakerBurst) {
      this.trippedAt = a.now;
      this.tripReason = `${this.asks.length} cordon requests within ${Math.round(this.cfg.breakerWindowMs / 60_000)} min`;
      return {
        verdict: 'refused',
        tripped: true,
        limit: 'breaker',
        reason: `breaker tripped: ${this.tripReason}`,
      };
    }
    const b = this.budget();
    const nOut = this.out.size + this.reserved.size;
    if (nOut + 1 > b.nodes)
      return {
        verdict: 'refused',
        limit: b.by,
        reason: `fleet budget: ${nOut} of ${b.fleet} nodes out, limit ${b.nodes} (${describeLimit(this.cfg, b)})`,
      };
    this.cordons = this.cordons.filter((t) => a.now - t < 3_600_000);
    if (this.cordons.length >= (this.cfg.perHour ?? 0))
      return {
        verdict: 'refused',
        limit: 'per_hour',
        reason: `rate: ${this.cordons.length} cordons in the last hour, limit ${this.cfg.perHour} (--cordon-per-hour)`,
      };
    this.cordons.push(a.now);
    if (!this.cfg.enabled) {
      this.out.add(a.host);
      return { verdict: 'dry_run', reason: 'dry-run: automation is not enabled' };
    }
    if (this.cfg.approval) {
      this.reserved.add(a.host);
      return { verdict: 'pending_approval', reason: 'waiting for a person to approve' };
    }
    this.out.add(a.host);
    return { verdict: 'execute', reason: 'within budget' };
  }

  /** A pending cordon was approved (it keeps the budget slot it reserved) or rejected (frees it). */
  settle(host: string, approved: boolean): void {
    this.reserved.delete(host);
    if (approved) this.out.add(host);
  }

  /** A cordon that failed for good, or a node that returned: its budget slot is free again. */
  returned(host: string): void {
    this.out.delete(host);
    this.reserved.delete(host);
  }

  resetBreaker(): boolean {
    const was = this.trippedAt !== undefined;
    this.trippedAt = undefined;
    this.tripReason = undefined;
    this.asks = [];
    return was;
  }
}

/** Which setting sets a budget's node limit, in the operator's words (`--cordon-max-nodes 2`). */
export function describeLimit(cfg: SafetyConfig, b: Budget): string {
  if (b.by === 'max_nodes') return `--cordon-max-nodes ${cfg.maxNodes}`;
  const share = `--cordon-max-share ${cfg.maxShare} of ${b.fleet}`;
  return b.floored ? `${share} rounds to 0: one node is the floor` : share;
}
