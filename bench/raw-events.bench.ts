/**
 * What keeping every raw event costs the store, part by part: the `detect` insert of a simulated
 * job's steps (what `--no-events` writes) is the baseline, and each row adds the raw events into a
 * table that does one more thing (read only, stored, sorted and deduplicated, with views). The
 * measurement runs in a process of its own (bench/raw-events-child.ts).
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { loadNote, type Measurement, type Section } from './harness.js';

export async function rawEventsBench(): Promise<Section> {
  const child = spawnSync(process.execPath, [join(import.meta.dirname, 'raw-events-child.js')], {
    encoding: 'utf8',
    maxBuffer: 1 << 20,
  });
  if (child.status !== 0) throw new Error(`raw-events child failed: ${child.stderr.trim()}`);
  const d = JSON.parse(child.stdout) as {
    events: number;
    rows: { name: string; ms: number; cpuUs: number }[];
  };
  const m = d.rows.map((r): Measurement => ({ name: r.name, items: d.events, unit: 'events', bestMs: r.ms }));
  const cpu = (k: number) => d.rows[k].cpuUs / d.events;
  const steps = cpu(0);
  const last = d.rows.length - 1;
  return {
    title: 'Raw events in chDB: what keeping them costs',
    what:
      `${d.events.toLocaleString('en-US')} events of a simulated 256-rank job, inserted into chDB in this process as \`detect\` writes them: 32,768 events per insert (the largest delivery \`detect\` merges), the raw events as TabSeparated next to the step rows, in parallel. ` +
      'Each row sends the raw events to a table that does one more thing; tables are emptied before each run, inserts are not deduplicated against earlier runs; best of 3, variants in turn.',
    baseline: m[0],
    rows: m.slice(1),
    notes: [
      `CPU of this process per event (engine threads and background merges included): ${d.rows
        .map(
          (r, k) =>
            `${r.name.replace(/ \(.*\)$/, '').replace(/^\+ raw events into /, '')} ${cpu(k).toFixed(1)} µs`,
        )
        .join('; ')}.`,
      `Keeping raw events costs ${(cpu(last) - steps).toFixed(1)} µs of CPU per event here, of which ${(cpu(1) - steps).toFixed(1)} µs the engine spends taking the rows in at all (a Null table stores nothing) and ${(cpu(last) - cpu(3)).toFixed(1)} µs the views that type GPU samples, faults, checkpoints and job lifecycle out of them.`,
      loadNote(),
    ],
  };
}
