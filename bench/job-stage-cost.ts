/**
 * A job stage's CPU by part, in one process (docs/operations.md, "Capacity"): one simulated job's
 * shard records are made by a `ShardStageRunner` over its host-group-keyed events, sent through
 * JSON as the records topic carries them, and fed with the job's own events (validated, as the
 * pipeline does) to a `JobStageRunner`, in the order they were made, twice: once to warm up, once
 * measured. No bus, no store: what the job stage's JavaScript costs per event of the job, split
 * (wall time, by part) into parsing the records, taking them (merge), judging them (the slow-link
 * detector), the job's own events and the step-stage detectors they reach.
 *
 *   node --import tsx bench/job-stage-cost.ts [--ranks 16384] [--steps 6] [--prof FILE]
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { JobStageRunner } from '../detectors/job-stage.js';
import { DetectorRunner } from '../detectors/runner.js';
import type { ShardReduced } from '../detectors/slowlink/shard-reduce.js';
import type { RankwatchEvent } from '../schema/events.js';
import { validateEvent } from '../schema/validate.js';
import { argOption } from './proc-cpu.js';
import { jobStageInput } from './shard-input.js';

const ranks = Number(argOption('ranks') ?? 16_384);
const steps = Number(argOption('steps') ?? 6);
/** `--prof FILE`: a V8 CPU profile of the measured feed alone (open it in Chrome's DevTools). */
const profFile = argOption('prof');

/** Input in arrival order: a job-keyed message of events, or one of shard records (JSON lines). */
type Message = { events: unknown[] } | { records: string[] };

function input(job: string): { messages: Message[]; events: number } {
  const messages: Message[] = [];
  const events = jobStageInput(ranks, steps, job, {
    jobBatch: (b) => messages.push({ events: b.events.map((e) => structuredClone(e)) }),
    records: (rs) => messages.push({ records: rs.map((r) => JSON.stringify(r)) }),
  });
  return { messages, events };
}

/** A job stage that times its judge calls (the slow-link detector's share). */
class TimedJobStage extends JobStageRunner {
  judgeNs = 0n;
  protected override toJobReduced(r: ShardReduced): void {
    const t = process.hrtime.bigint();
    super.toJobReduced(r);
    this.judgeNs += process.hrtime.bigint() - t;
  }
}

/** Time in the step-stage detectors (every event handed over, whichever call releases it). */
let detectorsNs = 0n;
const push = DetectorRunner.prototype.push;
DetectorRunner.prototype.push = function (this: DetectorRunner, e: RankwatchEvent) {
  const t = process.hrtime.bigint();
  push.call(this, e);
  detectorsNs += process.hrtime.bigint() - t;
};

async function run(job: string, profile?: string): Promise<void> {
  const { messages, events } = input(job);
  const session = profile ? new Session() : undefined;
  if (session) {
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.start');
  }
  const runner = new TimedJobStage({}, { now: () => 0 });
  let parseNs = 0n;
  let recordsNs = 0n;
  let eventsNs = 0n;
  let records = 0;
  let jobEvents = 0;
  detectorsNs = 0n;
  const cpu0 = process.cpuUsage();
  for (const m of messages) {
    let t = process.hrtime.bigint();
    if ('records' in m) {
      const values = m.records.map((line) => JSON.parse(line) as unknown);
      const parsed = process.hrtime.bigint();
      parseNs += parsed - t;
      t = parsed;
      const j = runner.judgeNs + detectorsNs;
      for (const v of values) runner.shardRecord(v);
      records += values.length;
      recordsNs += process.hrtime.bigint() - t - (runner.judgeNs + detectorsNs - j);
    } else {
      const j = runner.judgeNs + detectorsNs;
      for (const value of m.events) {
        const v = validateEvent(value);
        if (v.ok) runner.push(v.event);
      }
      jobEvents += m.events.length;
      eventsNs += process.hrtime.bigint() - t - (runner.judgeNs + detectorsNs - j);
    }
    runner.take();
  }
  runner.endOfInput();
  runner.take();
  const cpu = process.cpuUsage(cpu0);
  if (session && profile) {
    const { profile: p } = await session.post('Profiler.stop');
    writeFileSync(profile, JSON.stringify(p));
    session.disconnect();
  }
  const us = (ns: bigint) => (Number(ns) / 1000 / events).toFixed(3);
  console.log(
    `${job}: ${events} events of a ${ranks}-rank job, ${steps} steps; the job stage reads ${jobEvents} and ${records} shard records`,
  );
  console.log(
    `  µs per event of the job: CPU ${((cpu.user + cpu.system) / events).toFixed(3)} (the process, every thread); ` +
      `wall time by part (a CPU shared with other work inflates these): parse records ${us(parseNs)}, take records ${us(recordsNs)}, ` +
      `judge records ${us(runner.judgeNs)}, job events (validate, hold) ${us(eventsNs)}, step-stage detectors ${us(detectorsNs)}`,
  );
}

await run('warm-up');
await run('measured', profFile);
