/**
 * How far V8 lets the old generation grow between full collections. By default it may grow to
 * several times its live size when collections are cheap; a detector process holds a job's live
 * state (~1.3 KB per rank) and sheds, every step, objects that lived across many young collections
 * (a step's parsed events and frames), so at 65,536 ranks it sat on ~100 MB of dead objects above
 * its live state. Growing by at most 1.5x bounds that for a few percent of CPU (docs/operations.md,
 * "Memory and CPU per rank"). RANKWATCH_HEAP_GROWING_PERCENT (cli/process-options.ts) sets another
 * bound (0: V8's own policy), as does `node --heap-growing-percent=N` (NODE_OPTIONS does not take
 * that flag).
 */
import { setFlagsFromString } from 'node:v8';

export const HEAP_GROWING_PERCENT = 50;

/** The V8 flag to set, or undefined to leave V8's policy (node was given one, or the percent is 0). */
export function heapGrowthFlag(
  execArgv: readonly string[],
  percent = HEAP_GROWING_PERCENT,
): string | undefined {
  if (execArgv.some((a) => /^--heap[-_]growing[-_]percent(=|$)/.test(a))) return undefined;
  return percent === 0 ? undefined : `--heap-growing-percent=${percent}`;
}

/** Sets the bound for this process (once, before the heap has grown); returns the flag set, if any. */
export function boundHeapGrowth(percent?: number): string | undefined {
  const flag = heapGrowthFlag(process.execArgv, percent);
  if (flag) setFlagsFromString(flag);
  return flag;
}
