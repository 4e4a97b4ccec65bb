/**
 * One size of the scale bench, in a process of its own: parses a job file into events, then times
 * the DetectorRunner over them (detectors alone, no I/O), best of three passes. Prints `{ events, ms }` as JSON.
 */
import { readFileSync } from 'node:fs';
import { DetectorRunner } from '../detectors/runner.js';
import type { RankwatchEvent } from '../schema/events.js';

const events: RankwatchEvent[] = [];
for (const line of readFileSync(process.argv[2], 'utf8').split('\n'))
  if (line.length > 0) events.push(JSON.parse(line) as RankwatchEvent);
// Best of three passes, each with a fresh runner: the machine is shared, so one pass is noisy.
let best = Number.POSITIVE_INFINITY;
for (let pass = 0; pass < 3; pass++) {
  const runner = new DetectorRunner();
  const t = performance.now();
  for (let i = 0; i < events.length; i++) {
    runner.push(events[i]);
    if ((i & 0xffff) === 0) runner.take(); // drained as the pipeline drains it
  }
  runner.endOfInput();
  runner.take();
  best = Math.min(best, performance.now() - t);
}
console.log(JSON.stringify({ events: events.length, ms: best }));
