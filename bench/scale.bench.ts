/**
 * Cost per event and memory per rank as the job grows: simulated jobs of 256, 4,096, 16,384 and
 * 65,536 ranks (about a million events each: fewer steps for bigger jobs), each size in processes
 * of its own. Events/s of the detectors alone (events parsed beforehand) and of `rankwatch replay`
 * end to end, as ratios to 256 ranks; peak RSS of the replay, and what each added rank adds to it.
 * 256, 16,384 and 65,536 ranks also run at two lengths: the difference is the cost of the later
 * steps alone, without the first steps' creation of every rank's state (large at few steps).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClusterSim } from '../sim/cluster.js';
import { loadNote, type Measurement, rate, type Section } from './harness.js';
import { writeSimFile } from './sim-file.js';

const SIZES: [ranks: number, steps: number][] = [
  [256, 600],
  [256, 300],
  [4096, 40],
  [16384, 10],
  [16384, 20],
  [65536, 3],
  [65536, 6],
];

interface Size {
  ranks: number;
  steps: number;
  detect: Measurement;
  replay: Measurement;
  rssMb: number;
}

/** Rounds of `rankwatch replay` per size, taken in turn across sizes so load drift hits every size alike. */
const REPLAY_ROUNDS = 5;

interface Prepared {
  ranks: number;
  steps: number;
  file: string;
  /** "N ranks x S steps": every row of this size is named with it. */
  label: string;
  detect: Measurement;
}

/** Writes the job's file and times the detectors alone over it, in a process of its own. */
function prepare(ranks: number, steps: number, dir: string): Prepared {
  const file = join(dir, `job-${ranks}-${steps}.jsonl`);
  const n = writeSimFile(new ClusterSim({ ranks, steps, job: `scale-${ranks}` }), file);
  const child = spawnSync(process.execPath, [join(import.meta.dirname, 'scale-child.js'), file], {
    encoding: 'utf8',
    maxBuffer: 1 << 20,
  });
  if (child.status !== 0) throw new Error(`scale child at ${ranks} ranks failed: ${child.stderr.trim()}`);
  const d = JSON.parse(child.stdout) as { events: number; ms: number };
  if (d.events !== n) throw new Error(`scale child at ${ranks} ranks read ${d.events} of ${n} events`);
  const label = `${ranks.toLocaleString('en-US')} ranks x ${steps} steps`;
  return {
    ranks,
    steps,
    file,
    label,
    detect: { name: `detectors, ${label}`, items: d.events, unit: 'events', bestMs: d.ms },
  };
}

/** One `rankwatch replay FILE` as a process: wall time, events and its own peak RSS. */
function replayOnce(p: Prepared, dir: string): { ms: number; events: number; rssMb: number } {
  const bin = join(import.meta.dirname, '..', '..', 'bin', 'rankwatch.js');
  const t = performance.now();
  const cli = spawnSync(process.execPath, [bin, 'replay', p.file, '--findings', join(dir, 'f.jsonl')], {
    encoding: 'utf8',
  });
  const ms = performance.now() - t;
  const m = /replayed (\d+) events.*peak RSS (\d+) MB/.exec(cli.stderr);
  if (!m)
    throw new Error(`rankwatch replay at ${p.ranks} ranks: output not understood: ${cli.stderr.trim()}`);
  return { ms, events: Number(m[1]), rssMb: Number(m[2]) };
}

function runSizes(dir: string): Size[] {
  const prepared = SIZES.map(([ranks, steps]) => {
    process.stderr.write(`  ${ranks} ranks x ${steps} steps...\n`);
    return prepare(ranks, steps, dir);
  });
  const runs = prepared.map(() => [] as ReturnType<typeof replayOnce>[]);
  for (let round = 0; round < REPLAY_ROUNDS; round++)
    prepared.forEach((p, i) => {
      runs[i].push(replayOnce(p, dir));
    });
  return prepared.map((p, i) => {
    const best = runs[i].reduce((a, b) => (b.ms < a.ms ? b : a));
    const rss = runs[i].map((r) => r.rssMb).sort((a, b) => a - b);
    return {
      ranks: p.ranks,
      steps: p.steps,
      detect: p.detect,
      replay: {
        name: `replay, ${p.label}`,
        items: best.events,
        unit: 'events',
        bestMs: best.ms,
      },
      rssMb: rss[Math.floor(rss.length / 2)],
    };
  });
}

export async function scaleBench(): Promise<Section> {
  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-scale-'));
  const load = loadNote();
  let sizes: Size[];
  try {
    sizes = runSizes(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const [base] = sizes;
  const rest = sizes.filter((s) => s.ranks !== base.ranks);
  const fmt = (x: number) => Math.round(x).toLocaleString('en-US');
  const perRank = (s: Size) => ((s.rssMb - base.rssMb) * 1024) / (s.ranks - base.ranks);
  const label = (s: Size) => `${fmt(s.ranks)} ranks x ${s.steps}`;
  // The later steps alone: the longer run of a size less its shorter run, events and time. Creating
  // every rank's state in the first steps, and the process's start, cancel out.
  const steady = new Map<number, number>();
  for (const long of sizes) {
    const short = sizes.find((s) => s.ranks === long.ranks && s.steps < long.steps);
    if (short)
      steady.set(
        long.ranks,
        (long.replay.items - short.replay.items) / ((long.replay.bestMs - short.replay.bestMs) / 1000),
      );
  }
  const steady256 = steady.get(base.ranks)!;
  return {
    title: 'Scale: 256 to 65,536 ranks',
    what:
      `Simulated jobs (tp 8, pp 4, the rest data-parallel; steps, collectives, 1 Hz GPU telemetry), about a million events each (256, 16,384 and 65,536 ranks also at half or twice the steps), every size in processes of its own; detectors best of three passes; replay best of ${REPLAY_ROUNDS} runs taken in turn across sizes, peak RSS the median of them. ` +
      'Rows: the DetectorRunner alone over events parsed beforehand (`detectors`), and `rankwatch replay FILE --findings OUT` end to end as a process (`replay`, cold start included).',
    baseline: base.detect,
    rows: rest.map((s) => s.detect),
    notes: [
      `\`rankwatch replay\` end to end, ratio to 256 ranks: ${sizes
        .map(
          (s) =>
            `${label(s)} ${fmt(rate(s.replay))} events/s (${(rate(s.replay) / rate(base.replay)).toFixed(2)}x)`,
        )
        .join(', ')}.`,
      `\`rankwatch replay\`, the later steps alone (a longer run of the same size less a shorter one), ratio to 256 ranks: ${[
        ...steady,
      ]
        .map(([ranks, r]) => `${fmt(ranks)} ranks ${fmt(r)} events/s (${(r / steady256).toFixed(2)}x)`)
        .join(', ')}.`,
      `Peak RSS of \`rankwatch replay\`: ${sizes.map((s) => `${label(s)} ${s.rssMb} MB`).join(', ')}.`,
      `Peak RSS per added rank (from 256 ranks): ${rest.map((s) => `${perRank(s).toFixed(2)} KB to ${label(s)}`).join(', ')}.`,
      load,
    ],
  };
}
