/** Writes a simulated job's events to a JSON-lines file without holding them in memory; returns the event count. */
import { closeSync, openSync, writeSync } from 'node:fs';
import type { ClusterSim } from '../sim/cluster.js';

export function writeSimFile(sim: ClusterSim, file: string): number {
  const fd = openSync(file, 'w');
  let n = 0;
  let buf: string[] = [];
  try {
    for (const e of sim.events()) {
      buf.push(JSON.stringify(e));
      n++;
      if (buf.length === 20_000) {
        writeSync(fd, `${buf.join('\n')}\n`);
        buf = [];
      }
    }
    if (buf.length) writeSync(fd, `${buf.join('\n')}\n`);
  } finally {
    closeSync(fd);
  }
  return n;
}
