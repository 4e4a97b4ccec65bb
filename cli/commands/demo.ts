import { resolve } from 'node:path';
import { Pipeline } from '../../pipeline/pipeline.js';
import type { RankwatchEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { formatFault } from '../../sim/faults.js';
import { scoreRun } from '../../sim/score.js';
import { ChdbStore } from '../../store/chdb.js';
import { findingsOf, tableCounts } from '../../store/queries.js';
import { MemoryTransport } from '../../stream/memory.js';
import { type Command, num, parse } from '../args.js';
import { Progress } from '../progress.js';
import { table } from '../table.js';
import { SIM_FLAGS_HELP, simFromFlags, simOptions } from './sim.js';

export const DEMO_FAULTS = ['throttle:rank=37,at=60,until=150', 'nic:rank=200,at=100,factor=3'];
const BATCH = 4096;

export const demo: Command = {
  name: 'demo',
  usage: `rankwatch demo [options]

Runs a simulated training job through the embedded pipeline (in-process bus, detectors, chDB)
in accelerated event time. Prints each finding as it is detected, stores everything in chDB,
and ends with a summary: what was injected, what was found, how fast, and the job's MFU.
Without --fault it injects: ${DEMO_FAULTS.join(' and ')}.

  --speed X            event time runs X times faster than wall time; 0 = as fast as possible (default 60)
  --data DIR           chDB data folder (default ./data)
${SIM_FLAGS_HELP}`,
  async run(argv) {
    const { values } = parse(argv, { ...simOptions, speed: { type: 'string' }, data: { type: 'string' } });
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const faults = values.fault ?? DEMO_FAULTS;
    // Event time starts now (to the minute) unless --start says otherwise, so the stored data is
    // fresh for dashboards and within the raw-event TTL.
    const start = values.start ?? String(Math.floor(Date.now() / 60_000) * 60_000);
    const simulation = simFromFlags({ ...values, fault: faults, start });
    const speed = num(values.speed, 'speed', 60);
    const dataDir = resolve(values.data ?? 'data');
    const store = new ChdbStore({ path: dataDir });
    const transport = new MemoryTransport({ maxQueuedBatches: 16 });
    const progress = new Progress();
    const all: Finding[] = [];
    const t0 = simulation.opts.startTs;
    const clock = (ts: number) => {
      const s = Math.max(0, Math.round((ts - t0) / 1000));
      return `${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}`;
    };
    const pipeline = new Pipeline({
      transport,
      store,
      onFindings: (fs) => {
        all.push(...fs);
        for (const f of fs) {
          if (f.state === 'update') continue;
          progress.clear();
          console.log(
            `[${clock(f.ts)}] ${f.state === 'open' ? 'FOUND   ' : 'RESOLVED'} ${f.type}: ${f.summary}`,
          );
        }
      },
    });
    const { ranks, steps } = simulation.opts;
    console.log(
      `rankwatch demo: job ${simulation.opts.job}, ${ranks} ranks (tp ${simulation.layout.tp}, dp ${simulation.layout.dp}, pp ${simulation.layout.pp}), ` +
        `${steps} steps, ${simulation.opts.gpuModel}; injecting ${faults.join(', ')}; chDB at ${dataDir}`,
    );
    await pipeline.start();
    const wallStart = performance.now();
    let batch: RankwatchEvent[] = [];
    let produced = 0;
    let lastStep = 0;
    const publish = async () => {
      if (batch.length === 0) return;
      await transport.publish([{ key: simulation.opts.job, events: batch }]);
      batch = [];
    };
    for (const e of simulation.events()) {
      batch.push(e);
      produced++;
      if (e.kind === 'step') lastStep = e.step;
      if (batch.length >= BATCH) {
        await publish();
        if (speed > 0) {
          const ahead = (e.ts - t0) / speed - (performance.now() - wallStart);
          if (ahead > 5) await new Promise((r) => setTimeout(r, ahead));
        }
        const secs = (performance.now() - wallStart) / 1000;
        progress.update(
          (lastStep + 1) / steps,
          `step ${lastStep + 1}/${steps} · event time ${clock(e.ts)} · ${produced.toLocaleString('en-US')} events · ` +
            `${Math.round(produced / Math.max(secs, 0.001)).toLocaleString('en-US')} events/s · ${all.filter((f) => f.state === 'open').length} findings`,
        );
      }
    }
    await publish();
    await pipeline.stop();
    progress.clear();
    const wall = (performance.now() - wallStart) / 1000;

    const stored = await findingsOf(store, simulation.opts.job);
    const counts = await tableCounts(store);
    await store.close();
    const score = scoreRun(stored, simulation.faults);
    const mfu = pipeline.runner.jobMfu(simulation.opts.job);

    console.log('\nInjected faults');
    console.log(
      table(
        ['fault', 'where', 'onset', 'found by', 'detected at', 'time to detect', 'est. cost', 'true cost'],
        score.faults.map((s) => [
          formatFault(s.fault.spec),
          `${s.fault.host}${s.fault.gpu !== undefined ? `/${s.fault.gpu}` : ''}`,
          s.fault.onsetTs !== undefined ? clock(s.fault.onsetTs) : '-',
          s.first ? s.first.type : 'MISSED',
          s.first ? clock(s.first.ts) : '-',
          s.ttdMs !== undefined ? `${(s.ttdMs / 1000).toFixed(1)} s` : '-',
          s.estCostPct !== undefined ? `${s.estCostPct.toFixed(1)}%` : '-',
          `${s.fault.trueCostPct.toFixed(1)}%`,
        ]),
      ),
    );
    // One row per incident: its latest state, opened at its first.
    const latest = new Map<string, Finding>();
    const openedAt = new Map<string, number>();
    for (const f of stored) {
      latest.set(f.id, f);
      if (!openedAt.has(f.id)) openedAt.set(f.id, f.ts);
    }
    console.log('\nFindings (stored in chDB; latest state of each)');
    console.log(
      table(
        ['type', 'where', 'opened', 'state', 'severity', 'action', 'est. cost', 'summary'],
        [...latest.values()].map((f) => [
          f.type,
          `${f.host}${f.gpu !== undefined ? `/${f.gpu}` : ''}${f.rank !== undefined ? ` r${f.rank}` : ''}`,
          clock(openedAt.get(f.id) ?? f.ts),
          f.state,
          f.severity,
          f.action,
          f.est_cost_pct !== undefined ? `${f.est_cost_pct.toFixed(1)}%` : '-',
          f.summary.length > 70 ? `${f.summary.slice(0, 67)}...` : f.summary,
        ]),
      ),
    );
    console.log(
      `\nJob MFU: ${mfu !== undefined ? `${(mfu * 100).toFixed(1)}%` : 'unknown'} · ${produced.toLocaleString('en-US')} events in ${wall.toFixed(1)} s wall ` +
        `· stored: ${Object.entries(counts)
          .map(([t, n]) => `${t} ${n.toLocaleString('en-US')}`)
          .join(', ')}`,
    );
    console.log(`False findings: ${score.falseFindings.length}. Query the data: chDB folder ${dataDir}.`);
    return 0;
  },
};
