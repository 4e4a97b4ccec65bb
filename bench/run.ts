/** `npm run bench`: runs every benchmark, prints each as ratios to its same-run baseline, writes docs/benchmarks.md. */
import { writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { collectorBench } from './collector.bench.js';
import { detectBench } from './detect.bench.js';
import { renderSection, type Section } from './harness.js';
import { kafkaBench } from './kafka.bench.js';
import { replayBench } from './replay.bench.js';
import { storeInsertBench, storeQueryBench } from './store.bench.js';

const BENCHES: [string, () => Promise<Section | undefined>][] = [
  ['replay', replayBench],
  ['detect', detectBench],
  ['store-insert', storeInsertBench],
  ['store-query', storeQueryBench],
  ['kafka', kafkaBench],
  ['collector', collectorBench],
];

const only = process.argv[2];
const sections: string[] = [];
for (const [name, bench] of BENCHES) {
  if (only && only !== name) continue;
  process.stderr.write(`running ${name}...\n`);
  const section = await bench();
  if (!section) continue; // skipped; the bench said why
  const text = renderSection(section);
  console.log(`${text}\n`);
  sections.push(text);
}

if (!only) {
  const header = [
    '# Benchmarks',
    '',
    `Written by \`npm run bench\` on ${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}.`,
    'Every figure is shown next to a baseline measured in the same run, so the ratios travel between machines even when the absolute numbers do not.',
    '',
  ];
  writeFileSync(
    join(import.meta.dirname, '..', '..', 'docs', 'benchmarks.md'),
    `${header.join('\n')}\n${sections.join('\n\n')}\n`,
  );
}
