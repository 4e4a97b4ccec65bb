/**
 * The health model every long-running command reports on GET /healthz: named checks (store, bus,
 * credentials, …), each ok or failing with a reason and since when. A component marks its check
 * failing on every failed attempt and ok on success; only the transitions are logged (one line
 * when a failure starts, one when it ends, with how long it lasted and how many attempts failed),
 * so a retry loop never floods the log. Probes are checks read at report time from a component's
 * own state (e.g. the pipeline's failing store write). A degraded probe (the cordon breaker
 * tripped) is reported failing with `degraded: true` without making the process unhealthy: the
 * report's `status` says `degraded`, `ok` stays true, so /healthz still answers 200 and the
 * service stays reachable for the person who must act.
 */
import type { Logger } from './log.js';

export interface CheckState {
  ok: boolean;
  /** Why it is failing (absent when ok). */
  reason?: string;
  /** When the current state began (ISO time; absent for a probe that is ok). */
  since?: string;
  /** Failed attempts in the current failure. */
  failures?: number;
  /** Failing, but the process still does its work (a person must look). */
  degraded?: boolean;
}

export interface HealthReport {
  ok: boolean;
  /** `failing` when not ok; `degraded` when ok but a degraded check fails. */
  status: 'ok' | 'degraded' | 'failing';
  checks: Record<string, CheckState>;
}

interface Check {
  ok: boolean;
  reason?: string;
  since: number;
  failures: number;
}

export type Probe = () => { failingSince: number; reason: string } | undefined;

export class Health {
  private readonly checks = new Map<string, Check>();
  private readonly probes = new Map<string, { probe: Probe; degraded: boolean }>();
  /** Failing → ok transitions seen, per check (for /metrics). */
  private readonly outages = new Map<string, number>();

  constructor(
    private readonly log?: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  /** Marks `name` ok; logs the end of a failure. */
  ok(name: string): void {
    const c = this.checks.get(name);
    if (c?.ok) return;
    const t = this.now();
    if (c && !c.ok) {
      this.outages.set(name, (this.outages.get(name) ?? 0) + 1);
      this.log?.info(
        { check: name, failed_for_s: Math.round((t - c.since) / 100) / 10, failures: c.failures },
        `${name} ok again`,
      );
    }
    this.checks.set(name, { ok: true, since: t, failures: 0 });
  }

  /** Marks `name` failing with `reason` (an Error or text); logs only the start of a failure. */
  fail(name: string, reason: unknown): void {
    const text = reasonOf(reason);
    const c = this.checks.get(name);
    if (c && !c.ok) {
      c.failures++;
      c.reason = text;
      return;
    }
    this.checks.set(name, { ok: false, reason: text, since: this.now(), failures: 1 });
    this.log?.warn({ check: name }, `${name} failing: ${text}`);
  }

  /**
   * A check read from elsewhere at report time; failing while `probe` returns a failure. A
   * `degraded` one leaves the report ok (status `degraded`).
   */
  probe(name: string, probe: Probe, o: { degraded?: boolean } = {}): void {
    this.probes.set(name, { probe, degraded: o.degraded === true });
  }

  report(): HealthReport {
    const checks: Record<string, CheckState> = {};
    for (const [name, c] of this.checks)
      checks[name] = c.ok
        ? { ok: true, since: iso(c.since) }
        : { ok: false, reason: c.reason, since: iso(c.since), failures: c.failures };
    for (const [name, { probe, degraded }] of this.probes) {
      const f = probe();
      checks[name] = f
        ? { ok: false, reason: f.reason, since: iso(f.failingSince), ...(degraded ? { degraded } : {}) }
        : { ok: true };
    }
    const all = Object.values(checks);
    const ok = all.every((c) => c.ok || c.degraded);
    return { ok, status: !ok ? 'failing' : all.some((c) => !c.ok) ? 'degraded' : 'ok', checks };
  }

  /** One line naming what is failing, or undefined when all is ok (for an exit reason). */
  failing(): string | undefined {
    const bad = Object.entries(this.report().checks).filter(([, c]) => !c.ok && !c.degraded);
    return bad.length ? bad.map(([n, c]) => `${n}: ${c.reason}`).join('; ') : undefined;
  }

  /** Finished failures per check. */
  outageCounts(): Record<string, number> {
    return Object.fromEntries(this.outages);
  }
}

function reasonOf(r: unknown): string {
  const text = r instanceof Error ? r.message : String(r);
  return text.length > 300 ? `${text.slice(0, 300)}…` : text;
}

const iso = (t: number) => new Date(t).toISOString();
