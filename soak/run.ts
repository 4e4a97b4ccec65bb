/**
 * `npm run soak`: the fault-injection harness. A simulated job goes through collect → up and
 * through collect → Kafka → two detect processes while the harness breaks things (SIGKILL, broker
 * stop, full store disk, store down, token rotation, corrupt and oversized lines); and, in the long
 * form, through the sharded layout (two shard stages and a job stage) with a shard SIGKILLed.
 * At the end every line is accounted for; exit 1 if anything was lost, doubled or unexplained.
 *
 *   npm run soak                      the long form (a few minutes per path)
 *   npm run soak -- --short           the form .ci/run runs
 *   npm run soak -- --report docs/reliability.md   also write the accounting there
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Accounting } from './account.js';
import { httpPath } from './http-path.js';
import { makeInput } from './input.js';
import { kafkaPath } from './kafka-path.js';
import { shardedPath } from './sharded-path.js';

const USAGE = `npm run soak -- [--short] [--only http|kafka|sharded] [--kill-job-stage] [--seconds S] [--ranks N] [--steps N] [--report FILE] [--keep]

  --short        the CI form: a small job fed over about 40 s per path
  --only P       run one path: http (collect → up), kafka (collect → Kafka → 2 × detect) or sharded
                 (collect with host-group keys → Kafka → 2 shard stages + a job stage; not in --short)
  --kill-job-stage  the sharded path also SIGKILLs its job stage mid-stream and restarts it
  --seconds S    how long the feed of each path lasts (default 150; 40 with --short)
  --ranks N      ranks of the simulated job (default 64; 16 with --short)
  --steps N      steps of the simulated job (default 400; 120 with --short)
  --report FILE  write the accounting as Markdown (docs/reliability.md)
  --keep         keep the work folder (logs, stores) for a look afterwards`;

const { values } = parseArgs({
  options: {
    short: { type: 'boolean' },
    'kill-job-stage': { type: 'boolean' },
    only: { type: 'string' },
    seconds: { type: 'string' },
    ranks: { type: 'string' },
    steps: { type: 'string' },
    report: { type: 'string' },
    keep: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
const short = values.short === true;
const num = (v: string | undefined, d: number, name: string) => {
  const n = v === undefined ? d : Number(v);
  if (!Number.isInteger(n) || n <= 0) {
    console.error(`soak: --${name} must be a positive whole number, not ${v}`);
    process.exit(2);
  }
  return n;
};
const seconds = num(values.seconds, short ? 40 : 150, 'seconds');
const ranks = num(values.ranks, short ? 16 : 64, 'ranks');
const steps = num(values.steps, short ? 120 : 400, 'steps');
if (values.only && values.only !== 'http' && values.only !== 'kafka' && values.only !== 'sharded') {
  console.error(`soak: --only takes http, kafka or sharded, not ${values.only}`);
  process.exit(2);
}
const log = (l: string) => process.stderr.write(`[${new Date().toISOString()}] soak: ${l}\n`);
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-soak-'));

function table(a: Accounting): string {
  const rows = [
    `### ${a.path}`,
    '',
    `Faults injected: ${a.faults.map((f) => `\n- ${f}`).join('')}`,
    '',
    '| what | expected | stored | verdict |',
    '| --- | ---: | ---: | --- |',
    ...Object.entries(a.expected).map(
      ([k, n]) => `| raw \`${k}\` events | ${n} | ${a.stored[k] ?? 0} | ${verdict(n, a.stored[k] ?? 0)} |`,
    ),
    ...a.rollups.map((r) => `| ${r.name} | ${r.expected} | ${r.got} | ${verdict(r.expected, r.got)} |`),
    `| finding events (id, state, time) | ${a.findings.replay} (replay) | ${a.findings.stored} | ${
      a.findings.missing.length + a.findings.extra.length === 0
        ? 'equal'
        : `${a.findings.missing.length} missing, ${a.findings.extra.length} not in replay`
    } |`,
    '',
    `Lines fed: ${a.fed} (${a.valid} valid events). Set aside with a reason: ${a.refusedAtIngest} corrupt lines ` +
      `refused at ingest (the sender was told which and why), ${a.refusedOversized} oversized events refused by ` +
      `the collector. Dead letters in the store: ${
        Object.entries(a.deadLetters)
          .map(([r, n]) => `${n} × "${r}"`)
          .join('; ') || 'none'
      }.${
        Object.keys(a.droppedOther).length
          ? ` **Dropped by the collector:** ${Object.entries(a.droppedOther)
              .map(([r, n]) => `${n} × ${r}`)
              .join('; ')}.`
          : ''
      }`,
    '',
    `**Lost: ${a.lost}. Doubled: ${a.doubled}.** ${a.ok ? 'Every event accounted for.' : 'NOT accounted for.'}`,
  ];
  if (a.findings.missing.length)
    rows.push('', `Missing findings (first 5): ${a.findings.missing.slice(0, 5).join(', ')}`);
  if (a.findings.extra.length)
    rows.push('', `Findings not in replay (first 5): ${a.findings.extra.slice(0, 5).join(', ')}`);
  return rows.join('\n');
}
const verdict = (e: number, g: number) =>
  g === e ? 'once' : g < e ? `**${e - g} lost**` : `**${g - e} doubled**`;

let failed = false;
const results: Accounting[] = [];
try {
  for (const path of ['http', 'kafka', 'sharded'] as const) {
    if (values.only && values.only !== path) continue;
    // The sharded path starts four processes besides the broker: past the short form's minute.
    if (path === 'sharded' && short && values.only !== 'sharded') continue;
    const job = `soak-${path}-${Date.now().toString(36)}`;
    const input = makeInput({
      job,
      ranks,
      steps,
      seed: 7,
      faults: [`throttle:rank=${Math.min(5, ranks - 1)},at=${Math.floor(steps / 4)}`],
      oversized: 3,
    });
    log(
      `${path}: ${input.fed.length} lines (${input.valid.length} valid, ${input.corrupt} corrupt, ${input.oversized} oversized) over ${seconds} s`,
    );
    const sub = join(dir, path);
    const run = path === 'http' ? httpPath : path === 'kafka' ? kafkaPath : shardedPath;
    const a = await run({
      dir: sub,
      input,
      seconds,
      log: (l) => log(`${path}: ${l}`),
      killJobStage: values['kill-job-stage'] === true,
    });
    results.push(a);
    console.log(`${table(a)}\n`);
    if (!a.ok) failed = true;
  }
  if (values.report) {
    const cpu = cpus()[0]?.model ?? 'unknown CPU';
    writeFileSync(
      values.report,
      `# Reliability: the fault-injection harness\n\n` +
        `Generated by \`npm run soak -- --report ${values.report}${short ? ' --short' : ''}\` on ${new Date().toISOString().slice(0, 10)} ` +
        `(${cpus().length} × ${cpu}). A simulated job of ${ranks} ranks and ${steps} steps, with about 1% corrupt lines and ` +
        `3 oversized events mixed in, is fed over ${seconds} s through each path while the harness breaks things. ` +
        `Then every line is accounted for: stored once, or set aside with a reason; every rollup counts each step ` +
        `once; the stored findings equal those of \`rankwatch replay\` on the same valid input. \`.ci/run\` runs the ` +
        `short form (\`npm run soak -- --short\`).\n\n${results.map(table).join('\n\n')}\n`,
    );
    log(`wrote ${values.report}`);
  }
} catch (err) {
  failed = true;
  log(`failed: ${(err as Error).stack ?? err}`);
} finally {
  if (values.keep) log(`work folder kept: ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
}
const passed = results.filter((a) => a.ok).length;
// The plain closing line CI reads: one "test" per path.
console.log(
  `soak: ${passed} passed, ${results.length - passed + (failed && passed === results.length ? 1 : 0)} failed`,
);
process.exit(failed ? 1 : 0);
