import { DetectorRunner } from './detectors/runner.js';
import { ClusterSim } from './sim/cluster.js';

const gc = (globalThis as { gc?: () => void }).gc!;
function heap() {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}
function stateBytes(ranks: number, steps: number): number {
  const sim = new ClusterSim({ ranks, steps, checkpointEvery: 0, job: `mem-${ranks}` });
  const before = heap();
  const runner = new DetectorRunner();
  let n = 0;
  for (const e of sim.events()) {
    if (e.kind === 'job_event' && e.event === 'finished') break;
    runner.push(e);
    if (++n % 50_000 === 0) runner.take();
  }
  runner.take();
  const after = heap();
  if (runner.stats().events !== n) throw new Error('x');
  return after - before;
}
stateBytes(8192, 4);
for (let i = 0; i < 3; i++)
  console.log(((stateBytes(8192, 4) - stateBytes(256, 4)) / (8192 - 256)).toFixed(0));
