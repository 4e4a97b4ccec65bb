/** `npm run bench`: runs every benchmark, prints each as ratios to its same-run baseline, writes docs/benchmarks.md. */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { apiBench } from './api.bench.js';
import { collectorBench } from './collector.bench.js';
import { detectBench } from './detect.bench.js';
import { renderSection, type Section } from './harness.js';
import { ingestBench } from './ingest.bench.js';
import { inspectorBench } from './inspector.bench.js';
import { kafkaBench } from './kafka.bench.js';
import { rawEventsBench } from './raw-events.bench.js';
import { replayBench } from './replay.bench.js';
import { scaleBench } from './scale.bench.js';
import { shardedBench } from './sharded.bench.js';
import { startupBench } from './startup.bench.js';
import { storeInsertBench, storeQueryBench } from './store.bench.js';

const BENCHES: [string, () => Promise<Section | Section[] | undefined>][] = [
  ['replay', replayBench],
  ['detect', detectBench],
  ['store-insert', storeInsertBench],
  ['store-query', storeQueryBench],
  ['raw-events', rawEventsBench],
  ['kafka', kafkaBench],
  ['collector', collectorBench],
  ['inspector', inspectorBench],
  ['api', apiBench],
  ['ingest', ingestBench],
  ['startup', startupBench],
  ['scale', scaleBench],
  ['sharded', shardedBench],
];

const only = process.argv[2];
if (only && !BENCHES.some(([name]) => name === only)) {
  process.stderr.write(`no bench named ${only}; one of: ${BENCHES.map(([n]) => n).join(', ')}\n`);
  process.exit(2);
}
const doc = join(import.meta.dirname, '..', '..', 'docs', 'benchmarks.md');
const sections = new Map<string, string>();
for (const [name, bench] of BENCHES) {
  if (only && only !== name) continue;
  process.stderr.write(`running ${name}...\n`);
  const section = await bench();
  if (!section) continue; // skipped; the bench said why
  // A bench may measure several cases (replay: one section per mix), kept under one marker.
  const text = (Array.isArray(section) ? section : [section]).map(renderSection).join('\n\n');
  console.log(`${text}\n`);
  sections.set(name, text);
}

// Each section sits under a marker naming its bench, so `npm run bench -- NAME` rewrites only its own.
const previous = existsSync(doc) ? readFileSync(doc, 'utf8') : '';
const kept = new Map<string, string>();
for (const part of previous.split(/^<!-- bench:/m).slice(1)) {
  const end = part.indexOf(' -->\n');
  if (end > 0) kept.set(part.slice(0, end), part.slice(end + 5).trim());
}
const header = [
  '# Benchmarks',
  '',
  'Written by `npm run bench`; each section ends with the day, Node version and machine it ran on.',
  'Every figure is shown next to a baseline measured in the same run, so the ratios travel between machines even when the absolute numbers do not.',
  "`npm run bench -- NAME` reruns one section (NAME as in each section's marker); every ratio compares figures of one run.",
  '',
];
const body = BENCHES.map(([name]) => [name, sections.get(name) ?? kept.get(name)] as const)
  .filter(([, text]) => text !== undefined)
  .map(([name, text]) => `<!-- bench:${name} -->\n${text}`);
writeFileSync(doc, `${header.join('\n')}\n${body.join('\n\n')}\n`);
