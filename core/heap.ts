/**
 * How far V8 lets the old generation grow between full collections. By default it may grow to
 * several times its live size when collections are cheap; a detector process holds a job's live
 * state (~1 KB per rank) and sheds, every step, objects that lived across many young collections
 * (a step's events and links), so at 65,536 ranks it sat on ~150 MB of dead objects above ~70 MB
 * live. Growing by at most 1.5x bounds that for a few percent of CPU (docs/operations.md,
 * "Memory and CPU per rank"). A `--heap-growing-percent` given to node by the user wins.
 */
import { setFlagsFromString } from 'node:v8';

export const HEAP_GROWING_PERCENT = 50;

/** The V8 flag to set, or undefined when node was already given one (on its command line or in NODE_OPTIONS). */
export function heapGrowthFlag(
  execArgv: readonly string[],
  nodeOptions: string | undefined,
): string | undefined {
  const given = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)].some((a) =>
    /^--heap[-_]growing[-_]percent(=|$)/.test(a),
  );
  return given ? undefined : `--heap-growing-percent=${HEAP_GROWING_PERCENT}`;
}

/** Sets the bound for this process (once, before the heap has grown); returns the flag set, if any. */
export function boundHeapGrowth(): string | undefined {
  const flag = heapGrowthFlag(process.execArgv, process.env.NODE_OPTIONS);
  if (flag) setFlagsFromString(flag);
  return flag;
}
