/**
 * Checkpoint advice for one recorded job: each input measured from the job's own record where it
 * can be (saves, interruptions, restarts), else from the fleet's failure rate for its size, else
 * from what the user gave; every input says where it came from.
 */
import { adviseCheckpoint, type CheckpointAdvice, type MissingInputs } from './checkpoint.js';
import type { JobTimeline, SaveRow } from './interruptions.js';
import { FEW_EVENTS, poissonInterval } from './poisson.js';
import type { FailureReport } from './rates.js';

export interface SourcedInput {
  /** Seconds; undefined when nothing gave it. */
  value?: number;
  source: string;
}

export interface JobAdviceInputs {
  saveS: SourcedInput;
  mtbfS: SourcedInput;
  restartS: SourcedInput;
  intervalS: SourcedInput;
}

export interface JobAdvice {
  job: string;
  inputs: JobAdviceInputs;
  advice: CheckpointAdvice | MissingInputs;
}

export interface Overrides {
  saveS?: number;
  mtbfS?: number;
  restartS?: number;
  intervalS?: number;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const r1 = (x: number) => Math.round(x * 10) / 10;

export function jobAdviceInputs(
  t: JobTimeline,
  saves: SaveRow[],
  fleet?: FailureReport,
  given: Overrides = {},
): JobAdviceInputs {
  const ok = saves.filter((s) => s.ok).sort((a, b) => a.ts - b.ts);
  const cli = 'the command line';

  let saveS: SourcedInput;
  if (given.saveS !== undefined) saveS = { value: given.saveS, source: cli };
  else if (ok.length) {
    const mean = ok.reduce((s, x) => s + x.dur_ms, 0) / ok.length / 1000;
    saveS = {
      value: mean,
      source: `mean of the job's ${ok.length} successful save(s) (checkpoint events, phase save)`,
    };
  } else
    saveS = {
      source: `no successful save recorded for ${t.job}${saves.length ? ` (${saves.length} failed)` : ''}: the advice needs the duration of a save (or --save-s)`,
    };

  let intervalS: SourcedInput;
  if (given.intervalS !== undefined) intervalS = { value: given.intervalS, source: cli };
  else {
    // Gaps between consecutive saves with no interruption between them, minus the save itself.
    const gaps: number[] = [];
    for (let i = 1; i < ok.length; i++) {
      const a = ok[i - 1].ts;
      const b = ok[i].ts;
      if (t.interruptions.some((x) => x.ts > a && x.ts < b)) continue;
      gaps.push((b - a - ok[i].dur_ms) / 1000);
    }
    const m = gaps.length ? median(gaps) : undefined;
    intervalS =
      m === undefined
        ? {
            source:
              'fewer than two consecutive saves recorded: the current interval is unknown (or --interval-s)',
          }
        : m > 0
          ? { value: m, source: `median of ${gaps.length} gap(s) between consecutive saves, minus the save` }
          : {
              source: `saves last longer than the time between them (median gap minus save ${r1(m)} s): a save's dur_ms or the event times are likely wrong, so the current interval is left out`,
            };
  }

  let restartS: SourcedInput;
  const downs = t.interruptions.filter(
    (i) => i.seen_from === 'job_event' && i.down_ms !== null && i.down_ms > 0,
  );
  if (given.restartS !== undefined) restartS = { value: given.restartS, source: cli };
  else if (downs.length)
    restartS = {
      value: downs.reduce((s, i) => s + (i.down_ms ?? 0), 0) / downs.length / 1000,
      source: `mean of the job's ${downs.length} restart(s) (interrupted → restart job events)`,
    };
  else restartS = { source: 'no restart recorded: 0 s assumed (or --restart-s)' };

  let mtbfS: SourcedInput;
  const n = t.interruptions.length;
  const upH = t.up_ms / 3_600_000;
  if (given.mtbfS !== undefined) mtbfS = { value: given.mtbfS, source: cli };
  else if (n > 0 && upH > 0) {
    const ci = poissonInterval(n);
    mtbfS = {
      value: (upH / n) * 3600,
      source: `the job's own ${n} interruption(s) over ${r1(upH)} h up (95%: ${r1(upH / ci.hi)}–${ci.lo > 0 ? r1(upH / ci.lo) : '∞'} h)${n < FEW_EVENTS ? '; few events, so the interval is wide' : ''}`,
    };
  } else if (fleet?.mtbf?.hours && t.gpus > 0) {
    const m = fleet.mtbf;
    mtbfS = {
      value: m.hours! * 3600,
      source: `no interruption of ${t.job} yet: the fleet's ${fleet.fleet.count} interruption(s) over ${Math.round(fleet.fleet.gpu_hours)} GPU-hours, for its ${t.gpus} GPUs (95%: ${r1(m.lo)}–${m.hi === null ? '∞' : r1(m.hi)} h)`,
    };
  } else
    mtbfS = {
      source: `no interruption recorded for ${t.job} or the fleet yet: the advice needs a failure rate (a recorded interruption, or --mtbf-h)`,
    };
  return { saveS, mtbfS, restartS, intervalS };
}

export function jobAdvice(
  t: JobTimeline,
  saves: SaveRow[],
  fleet?: FailureReport,
  given: Overrides = {},
): JobAdvice {
  const inputs = jobAdviceInputs(t, saves, fleet, given);
  return {
    job: t.job,
    inputs,
    advice: adviseCheckpoint({
      saveS: inputs.saveS.value,
      mtbfS: inputs.mtbfS.value,
      restartS: inputs.restartS.value,
      intervalS: inputs.intervalS.value,
    }),
  };
}
