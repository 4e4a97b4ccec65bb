/** `npm run bench`: runs every benchmark, prints each as ratios to its same-run baseline, writes docs/benchmarks.md. */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { apiBench } from './api.bench.js';
import { collectorBench } from './collector.bench.js';
import { detectBench } from './detect.bench.js';
import { docSections, updateDoc } from './doc-sections.js';
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
const header = [
  '# Benchmarks',
  '',
  'Written by `npm run bench`; each section ends with the day, Node version and machine it ran on.',
  'Every figure is shown next to a baseline measured in the same run, so the ratios travel between machines even when the absolute numbers do not.',
  "`npm run bench -- NAME` reruns one section (NAME as in each section's marker); every ratio compares figures of one run.",
  "A rerun replaces only the text between its section's markers; what is written by hand outside them stays.",
].join('\n');
const readDoc = () => (existsSync(doc) ? readFileSync(doc, 'utf8') : '');
// Checked before hours of benches: a doc whose markers cannot be told apart is said now.
try {
  docSections(readDoc());
} catch (err) {
  process.stderr.write(`${doc}: ${(err as Error).message}\n`);
  process.exit(1);
}
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
// Read again: the doc may have been edited by hand while the benches ran.
try {
  const names = BENCHES.map(([name]) => name);
  writeFileSync(doc, updateDoc(readDoc(), sections, names, header));
} catch (err) {
  process.stderr.write(`${doc}: ${(err as Error).message}; the sections above were not written\n`);
  process.exit(1);
}
