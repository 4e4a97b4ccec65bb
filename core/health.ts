/**
 * The health model every long-running command reports on GET /healthz: named checks (store, bus,
 * credentials, …), each ok or failing with a reason and since when. A component marks its check
 * failing on every failed attempt and ok on success; only the transitions are logged (one line
 * when a failure starts, one when it ends, with how long it lasted and how many attempts failed),
 * so a retry loop never floods the log. Probes are checks read at report time from a component's
 * own state (e.g. the pipeline's failing store write).
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
}

export interface HealthReport {
  ok: boolean;
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
  private readonly probes = new Map<string, Probe>();
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

  /** A check read from elsewhere at report time; failing while `probe` returns a failure. */
  probe(name: string, probe: Probe): void {
    this.probes.set(name, probe);
  }

  report(): HealthReport {
    const checks: Record<string, CheckState> = {};
    for (const [name, c] of this.checks)
      checks[name] = c.ok
        ? { ok: true, since: iso(c.since) }
        : { ok: false, reason: c.reason, since: iso(c.since), failures: c.failures };
    for (const [name, p] of this.probes) {
      const f = p();
      checks[name] = f ? { ok: false, reason: f.reason, since: iso(f.failingSince) } : { ok: true };
    }
    return { ok: Object.values(checks).every((c) => c.ok), checks };
  }

  /** One line naming what is failing, or undefined when all is ok (for an exit reason). */
  failing(): string | undefined {
    const bad = Object.entries(this.report().checks).filter(([, c]) => !c.ok);
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
