/** Runs evaluation cases through the detectors and sums up, per fault family, what was caught, how fast, and what cried wolf. */
import type { DetectorConfig } from '../detectors/detector.js';
import { DetectorRunner } from '../detectors/runner.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { matches, scoreRun } from '../sim/score.js';
import type { EvalCase } from './matrix.js';

export interface RunResult {
  family: string;
  ranks: number;
  seed: number;
  faulty: boolean;
  detected: boolean;
  ttdMs?: number;
  /** Steps the job completed from onset to the finding, the onset step included (rank 0's step reports). */
  ttdSteps?: number;
  estCostPct?: number;
  trueCostPct?: number;
  falseFindings: Finding[];
  /**
   * Times a finding that caught the fault resolved while the fault went on (not because the job
   * ended): a finding whose cause persists must stay open.
   */
  resolvedWhileActive?: number;
  rankHours: number;
  events: number;
  /** Every finding opened, matched or not, and rank 0's step ends (to compare two paths of one job). */
  opened?: Finding[];
  stepEnds?: number[];
}

/**
 * One job through the detectors; `path` gives the events as the detectors receive them (default:
 * the simulator's own, eval/inspector.ts: through NCCL Inspector files and the collector).
 */
export function runCase(
  c: EvalCase,
  detectors: Partial<DetectorConfig> = {},
  path: (sim: ClusterSim) => Iterable<RankwatchEvent> = (sim) => sim.events(),
): RunResult {
  const sim = new ClusterSim(c.sim);
  const runner = new DetectorRunner(detectors);
  const findings: Finding[] = [];
  let events = 0;
  let first = Number.NaN;
  let last = 0;
  const stepTs: number[] = [];
  for (const e of path(sim)) {
    runner.push(e);
    if (e.kind === 'step' && e.rank === 0) stepTs.push(e.ts);
    events++;
    if (Number.isNaN(first)) first = e.ts;
    last = e.ts;
    if ((events & 0xffff) === 0) findings.push(...runner.take().findings);
  }
  runner.flush();
  findings.push(...runner.take().findings);
  const score = scoreRun(findings, sim.faults);
  const f = score.faults[0];
  // The fault's last active step ends at this event time (the job's end when it has no `until`).
  const until = f?.fault.spec.until;
  const activeUntil =
    until === undefined ? Number.POSITIVE_INFINITY : (stepTs[until] ?? Number.POSITIVE_INFINITY);
  const caught = new Set(
    findings.filter((x) => x.state === 'open' && f && matches(x, f.fault)).map((x) => x.id),
  );
  const resolvedWhileActive = findings.filter(
    (x) =>
      x.state === 'resolved' &&
      caught.has(x.id) &&
      x.ts <= activeUntil &&
      x.evidence.resolved_reason === undefined,
  ).length;
  return {
    family: c.family,
    ranks: c.ranks,
    seed: c.seed,
    faulty: f !== undefined,
    detected: f?.detected ?? false,
    ttdMs: f?.ttdMs,
    ttdSteps:
      f?.first && f.fault.onsetTs !== undefined
        ? stepTs.filter((t) => t > f.fault.onsetTs! && t <= f.first!.ts).length
        : undefined,
    estCostPct: f?.estCostPct,
    trueCostPct: f?.fault.trueCostPct,
    falseFindings: score.falseFindings,
    resolvedWhileActive: f ? resolvedWhileActive : undefined,
    rankHours: (c.ranks * (last - first)) / 3.6e6,
    events,
    opened: findings.filter((x) => x.state === 'open'),
    stepEnds: stepTs,
  };
}

export interface FamilySummary {
  family: string;
  runs: number;
  detected: number;
  /** undefined for clean jobs. */
  recall?: number;
  ttdMedianS?: number;
  ttdWorstS?: number;
  ttdMedianSteps?: number;
  ttdWorstSteps?: number;
  /** Median |estimated - true| cost, percentage points. */
  costErrorPp?: number;
  falseFindings: number;
  rankHours: number;
  falsePer1000RankHours: number;
}

export function summarise(results: RunResult[]): FamilySummary[] {
  const families = [...new Set(results.map((r) => r.family))];
  return families.map((family) => {
    const rs = results.filter((r) => r.family === family);
    const faulty = rs.filter((r) => r.faulty);
    const steps = faulty.filter((r) => r.ttdSteps !== undefined).map((r) => r.ttdSteps!);
    const ttds = faulty.filter((r) => r.ttdMs !== undefined).map((r) => r.ttdMs! / 1000);
    const errs = faulty
      .filter((r) => r.estCostPct !== undefined && r.trueCostPct !== undefined)
      .map((r) => Math.abs(r.estCostPct! - r.trueCostPct!));
    const falseFindings = rs.reduce((n, r) => n + r.falseFindings.length, 0);
    const rankHours = rs.reduce((n, r) => n + r.rankHours, 0);
    return {
      family,
      runs: rs.length,
      detected: faulty.filter((r) => r.detected).length,
      recall: faulty.length ? faulty.filter((r) => r.detected).length / faulty.length : undefined,
      ttdMedianS: median(ttds),
      ttdWorstS: ttds.length ? Math.max(...ttds) : undefined,
      ttdMedianSteps: median(steps),
      ttdWorstSteps: steps.length ? Math.max(...steps) : undefined,
      costErrorPp: median(errs),
      falseFindings,
      rankHours,
      falsePer1000RankHours: rankHours > 0 ? (1000 * falseFindings) / rankHours : 0,
    };
  });
}

function median(xs: number[]): number | undefined {
  if (xs.length === 0) return undefined;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}
