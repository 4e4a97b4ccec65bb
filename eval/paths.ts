/**
 * One job judged on two paths (the simulator's own events, and the same job through NCCL
 * Inspector files and the collector): do they open the same findings, on the same hosts and GPUs,
 * within one step of each other? And what the edge reduction did to the wire.
 */
import type { Finding } from '../schema/finding.js';
import type { RunResult } from './evaluate.js';
import type { InspectorPathStats } from './inspector.js';

export interface PathPair {
  native: RunResult;
  inspector: RunResult;
  stats: InspectorPathStats;
}

export interface PathAgreement {
  family: string;
  runs: number;
  /** Runs whose opened findings name the same types, hosts, GPUs and peers on both paths. */
  sameFindings: number;
  /** Runs whose every finding opened within one step of its twin (and the same findings). */
  withinStep: number;
  /** The largest |Δ open time| between twins, seconds and steps (the job's step ends between them). */
  worstDeltaS?: number;
  worstDeltaSteps?: number;
  /** The largest |Δ time to detect| of the injected fault, in steps. */
  worstTtdDeltaSteps?: number;
  /** What differs, per run that differs (one line each). */
  differences: string[];
  /** Inspector records per GPU per second (what the wire would carry unreduced), and events after the edge reduction. */
  recordsPerGpuS: number;
  eventsPerGpuS: number;
  dropped: number;
  parseErrors: number;
}

const who = (f: Finding) =>
  `${f.type} ${f.host}/${f.gpu ?? '-'}${f.peer_host ? ` ↔ ${f.peer_host}` : ''}${f.rank !== undefined ? ` rank ${f.rank}` : ''}`;

export function agreement(pairs: PathPair[]): PathAgreement[] {
  const families = [...new Set(pairs.map((p) => p.native.family))];
  return families.map((family) => {
    const ps = pairs.filter((p) => p.native.family === family);
    const a: PathAgreement = {
      family,
      runs: ps.length,
      sameFindings: 0,
      withinStep: 0,
      differences: [],
      recordsPerGpuS: 0,
      eventsPerGpuS: 0,
      dropped: 0,
      parseErrors: 0,
    };
    let gpuS = 0;
    let records = 0;
    let events = 0;
    for (const p of ps) {
      const n = p.native.opened ?? [];
      const i = p.inspector.opened ?? [];
      const nWho = n.map(who).sort();
      const iWho = i.map(who).sort();
      const same = nWho.join('\n') === iWho.join('\n');
      let within = same;
      for (const f of n) {
        const twin = i.find((g) => who(g) === who(f));
        if (!twin) continue;
        const d = Math.abs(twin.ts - f.ts) / 1000;
        const steps = stepsBetween(p.native.stepEnds ?? [], f.ts, twin.ts);
        a.worstDeltaS = Math.max(a.worstDeltaS ?? 0, d);
        a.worstDeltaSteps = Math.max(a.worstDeltaSteps ?? 0, steps);
        if (steps > 1) within = false;
      }
      if (p.native.ttdSteps !== undefined && p.inspector.ttdSteps !== undefined)
        a.worstTtdDeltaSteps = Math.max(
          a.worstTtdDeltaSteps ?? 0,
          Math.abs(p.inspector.ttdSteps - p.native.ttdSteps),
        );
      if (p.native.detected !== p.inspector.detected) within = false;
      if (same) a.sameFindings++;
      if (within) a.withinStep++;
      else
        a.differences.push(
          `${family}, ${p.native.ranks} ranks, seed ${p.native.seed}: native [${nWho.join('; ')}] vs Inspector [${iWho.join('; ')}]`,
        );
      gpuS += p.stats.gpuSeconds;
      records += p.stats.records;
      events += p.stats.reduced;
      a.dropped += Object.values(p.stats.dropped).reduce((x, y) => x + y, 0);
      a.parseErrors += p.stats.parseErrors;
    }
    a.recordsPerGpuS = gpuS > 0 ? records / gpuS : 0;
    a.eventsPerGpuS = gpuS > 0 ? events / gpuS : 0;
    return a;
  });
}

/** Steps that ended after the earlier of two times, up to the later. */
function stepsBetween(ends: number[], a: number, b: number): number {
  const [lo, hi] = a < b ? [a, b] : [b, a];
  return ends.filter((t) => t > lo && t <= hi).length;
}

export const AGREE_HEAD = [
  'scenario',
  'runs',
  'same findings (type, host, GPU, peer)',
  'all within a step',
  'worst Δ open (s / steps)',
  'worst Δ TTD (steps)',
  'records / GPU / s',
  'events / GPU / s after reduction',
  'records dropped',
];

export function agreementRows(as: PathAgreement[]): string[][] {
  return as.map((a) => [
    a.family,
    String(a.runs),
    `${a.sameFindings}/${a.runs}`,
    `${a.withinStep}/${a.runs}`,
    a.worstDeltaS === undefined ? '–' : `${a.worstDeltaS.toFixed(1)} / ${a.worstDeltaSteps}`,
    a.worstTtdDeltaSteps === undefined ? '–' : String(a.worstTtdDeltaSteps),
    a.recordsPerGpuS.toFixed(2),
    a.eventsPerGpuS.toFixed(2),
    String(a.dropped + a.parseErrors),
  ]);
}
