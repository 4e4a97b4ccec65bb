/**
 * Replay throughput on the 256-rank, 240-step simulated job: parse + validate + every detector,
 * single process, against a baseline of JSON.parse alone on the same lines (the floor any JSON
 * pipeline pays). Peak memory comes from the real CLI run on the same file.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DetectorRunner } from '../detectors/runner.js';
import { parseEventLine } from '../schema/validate.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { measure, type Section } from './harness.js';

export async function replayBench(): Promise<Section> {
  const sim = new ClusterSim({ ranks: 256, steps: 240, faults: [parseFault('throttle:rank=37,at=60')] });
  const lines = [...sim.events()].map((e) => JSON.stringify(e));
  const n = lines.length;
  const baseline = measure('JSON.parse only', n, 'events', () => {
    for (const l of lines) JSON.parse(l);
  });
  const validate = measure('parse + validate', n, 'events', () => {
    for (const l of lines) parseEventLine(l);
  });
  const replay = measure('parse + validate + detectors (replay)', n, 'events', () => {
    const r = new DetectorRunner();
    for (const l of lines) {
      const v = parseEventLine(l);
      if (v.ok) r.push(v.event);
    }
    r.flush();
    r.take();
  });

  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-bench-'));
  const file = join(dir, 'job.jsonl');
  writeFileSync(file, `${lines.join('\n')}\n`);
  const bin = join(import.meta.dirname, '..', '..', 'bin', 'rankwatch.js');
  const stderr = spawnSync(process.execPath, [bin, 'replay', file, '--findings', join(dir, 'f.jsonl')], {
    encoding: 'utf8',
  }).stderr;
  rmSync(dir, { recursive: true, force: true });
  const cli = /\(([\d,]+) events\/s\).*peak RSS (\d+) MB/.exec(stderr);

  return {
    title: 'Replay: 256 ranks, 240 steps',
    what: `${n.toLocaleString('en-US')} events (steps, collectives, 1 Hz GPU telemetry, checkpoints), one core, in memory.`,
    baseline,
    rows: [validate, replay],
    notes: cli
      ? [
          `\`rankwatch replay\` on the same file, end to end (read, parse, detect, write findings): ${cli[1]} events/s, peak RSS ${cli[2]} MB.`,
        ]
      : [`\`rankwatch replay\` output not understood: ${stderr.trim()}`],
  };
}
