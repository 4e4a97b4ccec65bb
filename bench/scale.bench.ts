/**
 * Cost per event and memory per rank as the job grows: simulated jobs of 256, 4,096, 16,384 and
 * 65,536 ranks (about a million events each: fewer steps for bigger jobs; 65,536 ranks also with
 * 6 steps, so that creating every rank's state once is not all the figure shows), each size in
 * processes of its own. Events/s of the detectors alone (events parsed beforehand) and of `rankwatch replay`
 * end to end, as ratios to 256 ranks; peak RSS of the replay, and what each added rank adds to it.
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
  [4096, 40],
  [16384, 10],
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

function runSize(ranks: number, steps: number, dir: string): Size {
  const file = join(dir, `job-${ranks}.jsonl`);
  const n = writeSimFile(new ClusterSim({ ranks, steps, job: `scale-${ranks}` }), file);
  const child = spawnSync(process.execPath, [join(import.meta.dirname, 'scale-child.js'), file], {
    encoding: 'utf8',
    maxBuffer: 1 << 20,
  });
  if (child.status !== 0) throw new Error(`scale child at ${ranks} ranks failed: ${child.stderr.trim()}`);
  const d = JSON.parse(child.stdout) as { events: number; ms: number };
  if (d.events !== n) throw new Error(`scale child at ${ranks} ranks read ${d.events} of ${n} events`);
  const bin = join(import.meta.dirname, '..', '..', 'bin', 'rankwatch.js');
  const t = performance.now();
  const cli = spawnSync(process.execPath, [bin, 'replay', file, '--findings', join(dir, 'f.jsonl')], {
    encoding: 'utf8',
  });
  const wallMs = performance.now() - t;
  const m = /replayed (\d+) events.*peak RSS (\d+) MB/.exec(cli.stderr);
  if (!m) throw new Error(`rankwatch replay at ${ranks} ranks: output not understood: ${cli.stderr.trim()}`);
  rmSync(file);
  const label = `${ranks.toLocaleString('en-US')} ranks x ${steps} steps`;
  return {
    ranks,
    steps,
    detect: { name: `detectors, ${label}`, items: d.events, unit: 'events', bestMs: d.ms },
    replay: { name: `replay, ${label}`, items: Number(m[1]), unit: 'events', bestMs: wallMs },
    rssMb: Number(m[2]),
  };
}

export async function scaleBench(): Promise<Section> {
  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-scale-'));
  const load = loadNote();
  const sizes: Size[] = [];
  try {
    for (const [ranks, steps] of SIZES) {
      process.stderr.write(`  ${ranks} ranks...\n`);
      sizes.push(runSize(ranks, steps, dir));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const [base, ...rest] = sizes;
  const fmt = (x: number) => Math.round(x).toLocaleString('en-US');
  const perRank = (s: Size) => ((s.rssMb - base.rssMb) * 1024) / (s.ranks - base.ranks);
  const label = (s: Size) => `${fmt(s.ranks)} ranks${s.ranks === 65536 ? ` x ${s.steps}` : ''}`;
  return {
    title: 'Scale: 256 to 65,536 ranks',
    what:
      'Simulated jobs (tp 8, pp 4, the rest data-parallel; steps, collectives, 1 Hz GPU telemetry), about a million events each, every size in processes of its own; detectors best of three passes, replay one run. ' +
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
      `Peak RSS of \`rankwatch replay\`: ${sizes.map((s) => `${label(s)} ${s.rssMb} MB`).join(', ')}.`,
      `Peak RSS per added rank (from 256 ranks): ${rest.map((s) => `${perRank(s).toFixed(2)} KB to ${label(s)}`).join(', ')}.`,
      load,
    ],
  };
}
