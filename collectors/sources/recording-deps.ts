/** Source deps for tests: everything a source hands over is kept for the test to read. */
import type { ParseProblem } from '../parsers/problems.js';
import type { SourceDeps } from '../source.js';

export function recordingDeps(host = 'this-node') {
  const events: Record<string, unknown>[] = [];
  const problems: ParseProblem[] = [];
  const errors: string[] = [];
  const logs: string[] = [];
  const d: SourceDeps = {
    host,
    logger: { info: (m) => logs.push(m), warn: (m) => logs.push(m) },
    now: () => 1_764_480_000_000,
    emit: (e) => events.push(...(e as Record<string, unknown>[])),
    parseProblems: (_s, p) => problems.push(...p),
    sourceError: (_s, err) => errors.push((err as Error).message),
    pciMap: new Map(),
  };
  return { d, events, problems, errors, logs };
}

/** Waits until `ok()` (generous: tests run on loaded machines), then returns either way. */
export async function until(ok: () => boolean, ms = 20_000): Promise<void> {
  for (const end = Date.now() + ms; !ok() && Date.now() < end; ) await new Promise((r) => setTimeout(r, 25));
}
