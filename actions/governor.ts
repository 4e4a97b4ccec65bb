/**
 * The safety governor: decides whether a cordon may happen, so that a bad detector or a storm of
 * findings cannot take the fleet down. Pure (time is passed in). On by default:
 * - dry-run unless `enabled`;
 * - a fleet budget: at most `maxShare` of the fleet and at most `maxNodes` nodes out at once, and
 *   at most `perHour` cordons in any hour;
 * - a breaker: `breakerBurst` cordon requests within `breakerWindowMs` trip it; tripped, it
 *   refuses every cordon until an admin resets it, yet verified nodes still return;
 * - never on evidence older than `maxEvidenceAgeMs`, nor on a job-relative finding (straggler,
 *   slow link) from a job with fewer than `minJobHosts` hosts to compare;
 * - `approval`: every cordon waits for a person.
 * Returning a node is never refused by budget or breaker: only a person's drain keeps it out.
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

export interface Decision {
  verdict: Verdict;
  reason: string;
}

const JOB_RELATIVE = new Set(['straggler', 'slow_link', 'nccl_slow_host']);

export class SafetyGovernor {
  private readonly out = new Set<string>();
  private readonly reserved = new Set<string>();
  private cordons: number[] = [];
  private asks: number[] = [];
  private trippedAt: number | undefined;

  constructor(
    readonly cfg: SafetyConfig,
    private readonly fleetSize: () => number,
  ) {}

  get tripped(): boolean {
    return this.trippedAt !== undefined;
  }

  nodesOut(): string[] {
    return [...this.out, ...this.reserved];
  }

  /** Nodes already out when rankwatch starts (read from the scheduler) count against the budget. */
  knownOut(host: string): void {
    this.out.add(host);
  }

  decideCordon(a: CordonAsk): Decision & { tripped?: boolean } {
    if (this.out.has(a.host) || this.reserved.has(a.host))
      return { verdict: 'refused', reason: 'already out' };
    this.asks = this.asks.filter((t) => a.now - t < this.cfg.breakerWindowMs);
    this.asks.push(a.now);
    if (this.trippedAt !== undefined)
      return { verdict: 'refused', reason: 'breaker tripped: an admin must reset it' };
    const age = a.now - a.evidenceTs;
    if (age > this.cfg.maxEvidenceAgeMs)
      return {
        verdict: 'refused',
        reason: `evidence is ${Math.round(age / 60_000)} min old (limit ${Math.round(this.cfg.maxEvidenceAgeMs / 60_000)})`,
      };
    if (JOB_RELATIVE.has(a.findingType) && (a.jobHosts ?? 0) < this.cfg.minJobHosts)
      return {
        verdict: 'refused',
        reason: `the job has ${a.jobHosts ?? 'an unknown number of'} hosts, fewer than ${this.cfg.minJobHosts} to compare`,
      };
    if (this.asks.length >= this.cfg.breakerBurst) {
      this.trippedAt = a.now;
      return {
        verdict: 'refused',
        tripped: true,
        reason: `breaker tripped: ${this.asks.length} cordon requests within ${Math.round(this.cfg.breakerWindowMs / 60_000)} min`,
      };
    }
    const fleet = Math.max(1, this.fleetSize());
    const limit = Math.min(this.cfg.maxNodes ?? 0, Math.floor((this.cfg.maxShare ?? 0) * fleet));
    const nOut = this.out.size + this.reserved.size;
    if (nOut + 1 > limit)
      return { verdict: 'refused', reason: `fleet budget: ${nOut} of ${fleet} nodes out, limit ${limit}` };
    this.cordons = this.cordons.filter((t) => a.now - t < 3_600_000);
    if (this.cordons.length >= (this.cfg.perHour ?? 0))
      return {
        verdict: 'refused',
        reason: `rate: ${this.cordons.length} cordons in the last hour, limit ${this.cfg.perHour}`,
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
    this.asks = [];
    return was;
  }
}
