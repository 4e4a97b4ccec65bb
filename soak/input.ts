/**
 * What the harness feeds: a simulated job's events as JSON lines, plus about 1% corrupt lines and
 * a few oversized events, each kind counted, so the end of the run can account for every line.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { ROOT } from './procs.js';

/** What run.ts hands each path: its own folder, the input, how long the feed lasts, a log line sink. */
export interface SoakPathOptions {
  dir: string;
  input: SoakInput;
  seconds: number;
  log: (l: string) => void;
  /** The sharded path also SIGKILLs its job stage mid-stream (`--kill-job-stage`). */
  killJobStage?: boolean;
}

export interface SoakInput {
  job: string;
  /** Valid events, in order, as the simulator wrote them. */
  valid: string[];
  /** Everything fed, in order: valid events with corrupt and oversized lines mixed in. */
  fed: string[];
  corrupt: number;
  oversized: number;
  /** Valid events by kind. */
  byKind: Record<string, number>;
}

const CORRUPTIONS: ((line: string) => string)[] = [
  (l) => l.slice(0, Math.floor(l.length / 2)), // cut mid-line
  (l) => l.replace(/"rank":\d+/, '"rank":"r7"').replace(/"host":"[^"]*"/, '"host":17'), // wrong types
  () => '\u0000\u0001 not json at all', // binary garbage
  (l) => l.replace('"v":1', '"v":9'), // an unknown contract version
];

export function makeInput(o: {
  job: string;
  ranks: number;
  steps: number;
  seed: number;
  faults: string[];
  oversized: number;
}): SoakInput {
  const args = ['sim', '--job', o.job, '--ranks', String(o.ranks), '--steps', String(o.steps)];
  args.push('--seed', String(o.seed), '--start', String(Date.now() - 2 * 3_600_000));
  for (const f of o.faults) args.push('--fault', f);
  const valid = execFileSync(process.execPath, [join(ROOT, 'bin', 'rankwatch.js'), ...args], {
    maxBuffer: 1 << 30,
  })
    .toString()
    .split('\n')
    .filter(Boolean);
  const byKind: Record<string, number> = {};
  for (const l of valid) {
    const kind = (JSON.parse(l) as { kind: string }).kind;
    byKind[kind] = (byKind[kind] ?? 0) + 1;
  }
  const fed: string[] = [];
  let corrupt = 0;
  let oversized = 0;
  const oversizeEvery = Math.max(1, Math.floor(valid.length / (o.oversized + 1)));
  valid.forEach((line, i) => {
    fed.push(line);
    if (i % 100 === 50) fed.push(CORRUPTIONS[corrupt++ % CORRUPTIONS.length](line));
    const e = JSON.parse(line) as { kind: string; ts: number };
    if (oversized < o.oversized && e.kind === 'gpu' && i >= oversizeEvery * (oversized + 1)) {
      // A valid GPU sample 1 ms later with a 2 MB unknown field: larger than any bus message may be.
      // Random, so compression cannot shrink it under the bus's message limit.
      fed.push(JSON.stringify({ ...e, ts: e.ts + 1, note: randomBytes(1_536 << 10).toString('base64') }));
      oversized++;
    }
  });
  return { job: o.job, valid, fed, corrupt, oversized, byKind };
}
