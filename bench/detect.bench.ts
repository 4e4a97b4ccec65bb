/**
 * Detector throughput on one core for a 4096-rank job, next to a naive straggler detector that
 * recomputes medians over a window of recent steps at every step (sorting per rank and per
 * stage), measured in the same run on the same step events.
 */
import { DetectorRunner } from '../detectors/runner.js';
import type { RankwatchEvent, StepEvent } from '../schema/events.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { measure, type Section } from './harness.js';

const WINDOW = 20;

/** The obvious detector: per rank, the median of its last WINDOW steps against its stage's median of those. */
function naiveStraggler(steps: StepEvent[], ranks: number): number {
  const windows: number[][] = Array.from({ length: ranks }, () => []);
  const stageOf = new Int32Array(ranks);
  let flagged = 0;
  let current = -1;
  const judge = () => {
    const medians = windows.map((w) => median(w));
    const stages = new Map<number, number[]>();
    for (let r = 0; r < ranks; r++) {
      const list = stages.get(stageOf[r]) ?? [];
      list.push(medians[r]);
      stages.set(stageOf[r], list);
    }
    const stageMedian = new Map([...stages].map(([s, xs]) => [s, median(xs)]));
    for (let r = 0; r < ranks; r++) if (medians[r] > 1.05 * stageMedian.get(stageOf[r])!) flagged++;
  };
  for (const e of steps) {
    if (e.step !== current) {
      if (current >= 0) judge();
      current = e.step;
    }
    const w = windows[e.rank];
    w.push(e.compute_ms);
    if (w.length > WINDOW) w.shift();
    stageOf[e.rank] = e.stage ?? 0;
  }
  judge();
  return flagged;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1];
}

export async function detectBench(): Promise<Section> {
  const ranks = 4096;
  const sim = new ClusterSim({ ranks, steps: 40, faults: [parseFault('throttle:rank=1000,at=10')] });
  const all: RankwatchEvent[] = [...sim.events()];
  const steps = all.filter((e): e is StepEvent => e.kind === 'step');
  const runAll = (events: RankwatchEvent[]) => () => {
    const r = new DetectorRunner();
    for (const e of events) r.push(e);
    r.flush();
    r.take();
  };
  const baseline = measure(
    'naive straggler: window medians re-sorted every step (step events)',
    steps.length,
    'events',
    () => {
      naiveStraggler(steps, ranks);
    },
  );
  const stepOnly = measure('rankwatch detectors (step events)', steps.length, 'events', runAll(steps));
  const full = measure(
    'rankwatch detectors (all events: steps, collectives, telemetry)',
    all.length,
    'events',
    runAll(all),
  );
  return {
    title: 'Detectors: 4096 ranks',
    what: `${all.length.toLocaleString('en-US')} events of a 4096-rank job (40 steps; ${steps.length.toLocaleString('en-US')} step events), one core, validated objects in memory.`,
    baseline,
    rows: [stepOnly, full],
  };
}
