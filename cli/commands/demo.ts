import { resolve } from 'node:path';
import { costText, mfuText } from '../../core/figures.js';
import { callbackSink, consoleSink } from '../../pipeline/sinks.js';
import type { RankwatchEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { formatFault } from '../../sim/faults.js';
import { scoreRun } from '../../sim/score.js';
import type { Store } from '../../store/store.js';
import { MemoryTransport } from '../../stream/memory.js';
import { type Command, defineOptions, optionsHelp, parseOptions } from '../args.js';
import { Progress } from '../progress.js';
import { ExpiredCount } from '../retention.js';
import { table } from '../table.js';
import { SIM_OPTIONS, simFromFlags } from './sim.js';

/**
 * The demo's two faults, placed by share of the job so they exist at any size: on the default
 * 256-rank, 240-step job, a GPU throttled from step 60 to 150 (rank 37) and a NIC rail degraded
 * from step 100 (rank 200).
 */
export function demoFaults(ranks: number, steps: number): string[] {
  const rank = (r: number) => Math.min(ranks - 1, Math.floor((ranks * r) / 256));
  const step = (s: number) => Math.min(steps - 1, Math.floor((steps * s) / 240));
  return [
    `throttle:rank=${rank(37)},at=${step(60)},until=${step(150)}`,
    `nic:rank=${rank(200)},at=${step(100)},factor=3`,
  ];
}
export const DEMO_FAULTS = demoFaults(256, 240);
const BATCH = 4096;

const DEMO_OPTIONS = defineOptions({
  speed: {
    kind: 'number',
    arg: 'X',
    default: 60,
    help: 'event time runs X times faster than wall time; 0 = as fast as possible',
  },
  data: { kind: 'file', arg: 'DIR', default: './data', help: 'chDB data folder' },
});

const OPTIONS = defineOptions({ ...DEMO_OPTIONS, ...SIM_OPTIONS });

export const demo: Command = {
  name: 'demo',
  usage: `rankwatch demo [options]

Runs a simulated training job through the embedded pipeline (in-process bus, detectors, chDB)
in accelerated event time. Prints each finding as it is detected, stores everything in chDB,
and ends with a summary: what was injected, what was found, how fast, and the job's MFU.
Without --fault it injects ${DEMO_FAULTS.join(' and ')} (on the default job;
placed at the same shares of the job for other --ranks and --steps). Each run is a new job
(demo-DATE-TIME unless --job), so the summary is this run's even when --data holds earlier ones.

${optionsHelp(DEMO_OPTIONS)}
${optionsHelp(SIM_OPTIONS)}`,
  options: OPTIONS,
  async run(argv) {
    const { values } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const { ranks, steps } = values;
    const faults = values.fault.length ? values.fault : demoFaults(ranks, steps);
    // Each run is its own job (the data folder keeps earlier runs), so its summary reads only its
    // own findings and rows. Event time starts now (sim's default), fresh for dashboards and
    // within the raw-event TTL.
    const job =
      values.job ?? `demo-${new Date().toISOString().slice(0, 19).replace(/[-:]/g, '').replace('T', '-')}`;
    const simulation = simFromFlags({ ...values, fault: faults, job });
    const speed = values.speed;
    const dataDir = resolve(values.data);
    // Loaded once past --help, which then needs neither the engine nor the detectors.
    const [{ buildPipeline }, { ChdbStore }, { findingsOf, jobDetail }] = await Promise.all([
      import('../../pipeline/build.js'),
      import('../../store/chdb.js'),
      import('../../store/queries.js'),
    ]);
    const store = new ChdbStore({ path: dataDir });
    const transport = new MemoryTransport({ maxQueuedBatches: 16 });
    const progress = new Progress();
    const all: Finding[] = [];
    const t0 = simulation.opts.startTs;
    const clock = (ts: number) => {
      const s = Math.max(0, Math.round((ts - t0) / 1000));
      return `${String(Math.floor(s / 60)).padStart(2, '0')}:${String(s % 60).padStart(2, '0')}`;
    };
    const pipeline = buildPipeline({
      transport,
      store,
      storeName: `chDB at ${dataDir}`,
      findingSinks: [
        callbackSink('summary', (fs) => all.push(...fs)),
        consoleSink(
          (line) => {
            progress.clear();
            console.log(line);
          },
          (f) => clock(f.ts),
          false,
        ),
      ],
    });
    console.log(
      `rankwatch demo: job ${simulation.opts.job}, ${ranks} ranks (tp ${simulation.layout.tp}, dp ${simulation.layout.dp}, pp ${simulation.layout.pp}), ` +
        `${steps} steps, ${simulation.opts.gpuModel}; injecting ${faults.join(', ')}; chDB at ${dataDir}`,
    );
    console.log(pipeline.describe());
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
    const expired = new ExpiredCount(undefined);
    for (const e of simulation.events()) {
      expired.see(e.ts);
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
    const counts = await jobCounts(store, simulation.opts.job);
    // The job's MFU as the store gives it to `report`, the API and the page.
    const mfu = (await jobDetail(store, simulation.opts.job))?.mfu_avg ?? null;
    await store.close();
    const score = scoreRun(stored, simulation.faults);

    const dropped = expired.message(produced);
    if (dropped) console.log(`\n${dropped}`);
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
          costText(s.estCostPct),
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
          costText(f.est_cost_pct),
          f.summary.length > 70 ? `${f.summary.slice(0, 67)}...` : f.summary,
        ]),
      ),
    );
    console.log(
      `\nJob MFU: ${mfuText(mfu, 'unknown')} · ${produced.toLocaleString('en-US')} events in ${wall.toFixed(1)} s wall ` +
        `· stored: ${Object.entries(counts)
          .map(([t, n]) => `${t} ${n.toLocaleString('en-US')}`)
          .join(', ')}`,
    );
    console.log(
      `False findings: ${score.falseFindings.length}. Query the data: chDB folder ${dataDir}, job ${simulation.opts.job}.`,
    );
    return 0;
  },
};

/** This job's rows in each table the demo writes (the folder may hold other runs). */
async function jobCounts(store: Store, job: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const t of ['events', 'steps', 'mfu', 'step_rollups', 'findings']) {
    const [row] = await store.query<{ n: string }>(
      `SELECT count() AS n FROM ${t} FINAL WHERE job = {job:String}`,
      {
        job,
      },
    );
    out[t] = Number(row?.n ?? 0);
  }
  return out;
}
