/**
 * How far V8 lets the old generation grow between full collections. By default it may grow to
 * several times its live size when collections are cheap; a detector process holds a job's live
 * state (~1.3 KB per rank) and sheds, every step, objects that lived across many young collections
 * (a step's parsed events and frames), so at 65,536 ranks it sat on ~100 MB of dead objects above
 * its live state. Growing by at most 1.5x bounds that for a few percent of CPU (docs/operations.md,
 * "Memory and CPU per rank"). RANKWATCH_HEAP_GROWING_PERCENT sets another bound (0: V8's own
 * policy), as does `node --heap-growing-percent=N` (NODE_OPTIONS does not take that flag).
 */
import { setFlagsFromString } from 'node:v8';
import { RankwatchError } from './errors.js';

export const HEAP_GROWING_PERCENT = 50;

/** The line the long-running commands' --help carries. */
export const HEAP_HELP = `Memory: the heap may grow ${HEAP_GROWING_PERCENT}% past its live size between full collections
  [RANKWATCH_HEAP_GROWING_PERCENT] (0: V8's own policy; docs/operations.md, memory per rank)`;

/** The V8 flag to set, or undefined to leave V8's policy (node was given one, or the setting is 0). */
export function heapGrowthFlag(execArgv: readonly string[], setting: string | undefined): string | undefined {
  if (execArgv.some((a) => /^--heap[-_]growing[-_]percent(=|$)/.test(a))) return undefined;
  let pct = HEAP_GROWING_PERCENT;
  if (setting !== undefined && setting !== '') {
    pct = Number(setting);
    if (!Number.isInteger(pct) || pct < 0)
      throw new RankwatchError(
        'RANKWATCH_ERR_CONFIG',
        `RANKWATCH_HEAP_GROWING_PERCENT must be a whole number of percent, 0 or more (0: V8's own policy), not "${setting}"`,
      );
  }
  return pct === 0 ? undefined : `--heap-growing-percent=${pct}`;
}

/** Sets the bound for this process (once, before the heap has grown); returns the flag set, if any. */
export function boundHeapGrowth(): string | undefined {
  const flag = heapGrowthFlag(process.execArgv, process.env.RANKWATCH_HEAP_GROWING_PERCENT);
  if (flag) setFlagsFromString(flag);
  return flag;
}
