/**
 * Replay of a 1,024-rank simulated job, end to end (`rankwatch replay FILE --findings OUT`: read,
 * parse, validate, every detector, write findings), against a bare loop that only reads the same
 * file and JSON.parses each line: the floor any JSON-lines replay pays. Both run in this process,
 * warm, best of three, alternating. Peak memory comes from the real CLI run on the same file.
 */
import { spawnSync } from 'node:child_process';
import { createReadStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { replay } from '../cli/commands/replay.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { readLineChunks } from '../stream/lines.js';
import { loadNote, type Measurement, type Section } from './harness.js';
import { writeSimFile } from './sim-file.js';

/** Reads the file in 1 MB chunks, splits lines, JSON.parses each: nothing else. */
async function bareLoop(file: string): Promise<number> {
  const text = new TextDecoder();
  let rest = '';
  let n = 0;
  for await (const bytes of createReadStream(file, { highWaterMark: 1 << 20 })) {
    const lines = (rest + text.decode(bytes as Buffer, { stream: true })).split('\n');
    rest = lines.pop() ?? '';
    for (const l of lines) if (l.length > 0 && JSON.parse(l)) n++;
  }
  if (rest.length > 0 && JSON.parse(rest)) n++;
  return n;
}

/** The same, reading through rankwatch's own line reader (stream/lines.ts): what replay pays for reading. */
async function readerLoop(file: string): Promise<number> {
  let n = 0;
  for await (const { lines } of readLineChunks(file))
    for (const l of lines) if (l.length > 0 && JSON.parse(l)) n++;
  return n;
}

export async function replayBench(): Promise<Section> {
  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-bench-'));
  const load = loadNote();
  try {
    const file = join(dir, 'job.jsonl');
    const out = join(dir, 'findings.jsonl');
    const sim = new ClusterSim({ ranks: 1024, steps: 120, faults: [parseFault('throttle:rank=37,at=30')] });
    const n = writeSimFile(sim, file);
    const runs = {
      bare: Number.POSITIVE_INFINITY,
      reader: Number.POSITIVE_INFINITY,
      replay: Number.POSITIVE_INFINITY,
    };
    // Warm-up, then three of each, alternating, so load on a shared machine hits both alike.
    for (let i = 0; i < 4; i++) {
      let t = performance.now();
      if ((await bareLoop(file)) !== n) throw new Error('bare loop read a different number of events');
      if (i > 0) runs.bare = Math.min(runs.bare, performance.now() - t);
      t = performance.now();
      if ((await readerLoop(file)) !== n) throw new Error('reader loop read a different number of events');
      if (i > 0) runs.reader = Math.min(runs.reader, performance.now() - t);
      t = performance.now();
      await replay.run([file, '--findings', out, '--quiet']);
      if (i > 0) runs.replay = Math.min(runs.replay, performance.now() - t);
    }
    const baseline: Measurement = {
      name: 'read + JSON.parse only (bare loop)',
      items: n,
      unit: 'events',
      bestMs: runs.bare,
    };
    const reader: Measurement = {
      name: "read with replay's line reader (stream/lines.ts) + JSON.parse only",
      items: n,
      unit: 'events',
      bestMs: runs.reader,
    };
    const row: Measurement = {
      name: '`rankwatch replay` (read, parse, validate, detectors, write findings)',
      items: n,
      unit: 'events',
      bestMs: runs.replay,
    };
    const bin = join(import.meta.dirname, '..', '..', 'bin', 'rankwatch.js');
    const stderr = spawnSync(process.execPath, [bin, 'replay', file, '--findings', out], {
      encoding: 'utf8',
    }).stderr;
    const cli = /\(([\d,]+) events\/s\).*peak RSS (\d+) MB/.exec(stderr);
    return {
      title: 'Replay: 1,024 ranks, 120 steps',
      what: `${n.toLocaleString('en-US')} events (steps, collectives, 1 Hz GPU telemetry, checkpoints; ${Math.round(n / 1024 / 120)} per rank and step), one core, from a JSON-lines file on disk; all loops warm, in one process, best of 3, alternating. The baseline reads as a plain loop does (1 MB chunks, TextDecoder, split); replay's reader reads 64 KB chunks, copies ASCII ones as latin1 and splits each chunk alone, so it is shown too.`,
      baseline,
      rows: [reader, row],
      notes: cli
        ? [
            `Against the loop with replay's own reader, replay runs at ${(runs.reader / runs.replay).toFixed(2)}x: what validation, the detectors and writing findings cost beyond reading and parsing.`,
            `\`rankwatch replay\` as its own process (cold start included): ${cli[1]} events/s, peak RSS ${cli[2]} MB.`,
            load,
          ]
        : [`\`rankwatch replay\` output not understood: ${stderr.trim()}`],
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
