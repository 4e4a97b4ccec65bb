/**
 * A simulated job's NCCL Inspector dump files through the built `rankwatch collect` (its bus a
 * file), as a node runs it: the hooks' events (steps with their pids) posted to the collector's
 * local port step by step, each step's collectives waited for before the next step is posted, as
 * a live run interleaves them (the detectors judge a step's collectives in the order a bus
 * carries them). Shared by the integration tests of the Inspector path.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { postLines, type Running, startRankwatch, until } from './helpers.js';

/** Each dump file's records' dump times (ms), sorted: a record is sent once its step's end is posted. */
function dumpTimes(dumps: string): number[] {
  const out: number[] = [];
  for (const f of readdirSync(dumps))
    for (const m of readFileSync(join(dumps, f), 'utf8').matchAll(/"dump_timestamp_us":(\d+)/g))
      out.push(Number(m[1]) / 1000);
  return out.sort((a, b) => a - b);
}

/** `rankwatch collect` writing its bus to the file `bus`, with `args` (its sources), JSON logs. */
export function fileCollector(bus: string, args: string[], running: Running[]): Running {
  const c = startRankwatch(
    [
      'collect',
      ...args,
      '--bus',
      `file:${bus}`,
      '--host',
      'collector-test',
      '--health-port',
      '0',
      '--flush-ms',
      '100',
    ],
    { ...process.env, RANKWATCH_LOG_FORMAT: 'json' },
  );
  running.push(c);
  return c;
}

/**
 * Runs the collector over `dumps` (every host's files, read from their start), posts `hook` (the
 * simulator's output with --inspector-dir) and returns the bus file's events once every record
 * and hook event was sent. `running` collects the child for the caller's cleanup.
 */
export async function collectInspector(
  work: string,
  dumps: string,
  hook: string[],
  running: Running[],
): Promise<Record<string, unknown>[]> {
  const times = dumpTimes(dumps);
  const bus = join(work, 'bus.jsonl');
  const config = join(work, 'collect.json');
  // Settling 0 and polling every 50 ms: the files already hold every record, so a step's events
  // can leave as soon as its end is known. The later steps' records wait for their steps' ends
  // meanwhile (a restarted job's new processes for their first step: holdMs): on a slow machine
  // longer than 15 s, which would send them as a snapshot of a step still running, so that is
  // turned off.
  writeFileSync(
    config,
    JSON.stringify({
      sources: [
        {
          type: 'nccl_inspector',
          dir: dumps,
          hosts: 'all',
          from: 'start',
          pollMs: 50,
          settleMs: 0,
          holdMs: 600_000,
          openEveryMs: 3_600_000,
        },
      ],
    }),
  );
  const c = fileCollector(bus, ['--config', config], running);
  const local = await until(
    'the health port',
    () => /health on (http:\/\/\S+)\/healthz/.exec(c.stderr())?.[1],
  );
  const sentSoFar = async (n: number) =>
    until(
      `${n} events sent`,
      async () => {
        const h = (await (await fetch(`${local}/healthz`)).json()) as Record<string, unknown>;
        return (h.events_sent as number) >= n ? h : undefined;
      },
      120_000,
    );
  // The hooks' events up to each step's end (its last step event), then the records dumped by then.
  let posted = 0;
  let chunk: string[] = [];
  let stepEnd = Number.NEGATIVE_INFINITY;
  let records = 0;
  const flushChunk = async () => {
    expect(new Set(await postLines(local, chunk))).toEqual(new Set([200]));
    posted += chunk.length;
    chunk = [];
    while (records < times.length && times[records] <= stepEnd) records++;
    await sentSoFar(posted + records);
  };
  let steps = false;
  for (const line of hook) {
    const step = line.includes('"kind":"step"');
    // The first other event after a step's events: that step's records can leave now.
    if (steps && !step) {
      await flushChunk();
      steps = false;
    }
    if (step) {
      stepEnd = Number(/"ts":(\d+)/.exec(line)?.[1]);
      steps = true;
    }
    chunk.push(line);
  }
  stepEnd = Number.POSITIVE_INFINITY;
  await flushChunk();
  const counters = await sentSoFar(hook.length + times.length);
  expect(counters.records_dropped).toEqual({});
  expect(counters.parse_errors).toEqual({});
  expect(await c.stop()).toBe(0);
  return readFileSync(bus, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}
