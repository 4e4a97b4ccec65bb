/**
 * Instruction counts for replay against the fast loop (docs/benchmarks.md, replay): runs one of
 * them PASSES times in this process, for valgrind to count, e.g.
 *
 *   valgrind --tool=cachegrind --cache-sim=no node --predictable dist/bench/replay-passes.js replay FILE 5
 *
 * less the same with 3, halved: one warm pass in the steady state (with 3 less 1, passes 2-3 still
 * hold TurboFan re-optimizing what the first pass's code depended on). Start-up, loading and the
 * scanner's learning drop out. Not part of `npm run bench`: under valgrind it takes minutes.
 *
 *   node dist/bench/replay-passes.js write-sim|write-field FILE EVENTS   the mix's first EVENTS
 *   node dist/bench/replay-passes.js fast|replay FILE PASSES
 */
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';
import { replay } from '../cli/commands/replay.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { writeFieldMixFile } from './field-mix.js';
import { fastLoop } from './replay.bench.js';
import { writeSimFile } from './sim-file.js';

const [what, file, count] = process.argv.slice(2);
const n = Number(count);

/** Keeps the file's first `events` lines. */
function cut(events: number): void {
  const lines = readFileSync(file, 'latin1').split('\n').slice(0, events);
  const fd = openSync(file, 'w');
  writeSync(fd, `${lines.join('\n')}\n`, null, 'latin1');
  closeSync(fd);
}

if (what === 'write-sim') {
  writeSimFile(
    new ClusterSim({ ranks: 1024, steps: 120, faults: [parseFault('throttle:rank=37,at=30')] }),
    file,
  );
  cut(n);
} else if (what === 'write-field') {
  writeFieldMixFile(file, 1024, 40);
  cut(n);
} else if (what === 'fast') {
  for (let i = 0; i < n; i++) fastLoop(file);
} else if (what === 'replay') {
  for (let i = 0; i < n; i++) await replay.run([file, '--findings', '/dev/null', '--quiet']);
} else {
  console.error('usage: replay-passes.js write-sim|write-field|fast|replay FILE N');
  process.exit(2);
}
