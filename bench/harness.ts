/** Tiny benchmark harness: best of N timed runs after a warm-up, and a markdown table writer. */
import { cpus, loadavg } from 'node:os';

export interface Measurement {
  name: string;
  /** Items processed per run (events, rows, ...). */
  items: number;
  unit: string;
  bestMs: number;
  /** Its own baseline, when not the section's (e.g. a bare route with the same body size). */
  baseline?: Measurement;
}

export function measure(name: string, items: number, unit: string, fn: () => void, runs = 3): Measurement {
  fn(); // warm-up: JIT, caches
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    fn();
    best = Math.min(best, performance.now() - t);
  }
  return { name, items, unit, bestMs: best };
}

export async function measureAsync(
  name: string,
  items: number,
  unit: string,
  fn: () => Promise<void>,
  runs = 3,
): Promise<Measurement> {
  await fn();
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    await fn();
    best = Math.min(best, performance.now() - t);
  }
  return { name, items, unit, bestMs: best };
}

export const rate = (m: Measurement) => (m.items / m.bestMs) * 1000;

export interface Section {
  title: string;
  what: string;
  baseline: Measurement;
  rows: Measurement[];
  notes?: string[];
}

export function renderSection(s: Section): string {
  const fmt = (x: number) => Math.round(x).toLocaleString('en-US');
  const lines = [
    `## ${s.title}`,
    '',
    s.what,
    '',
    '| measurement | per second | ratio to baseline |',
    '| --- | ---: | ---: |',
    ...[s.baseline, ...s.rows].map(
      (m) =>
        `| ${m === s.baseline ? `${m.name} (baseline)` : m.name} | ${fmt(rate(m))} ${m.unit}/s | ${(rate(m) / rate(m.baseline ?? s.baseline)).toFixed(2)}x${m.baseline ? ` (to ${m.baseline.name})` : ''} |`,
    ),
  ];
  lines.push('', ...[...(s.notes ?? []), runNote()].map((n) => `- ${n}`));
  return lines.join('\n');
}

/** Each section says when and on what it ran, so rerunning one section leaves the others' records true. */
const runNote = () =>
  `run on ${new Date().toISOString().slice(0, 10)} with Node ${process.version} on ${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}`;

/** Other work on the machine moves absolute figures (not the ratios much): say how much there was. */
export const loadNote = () =>
  `load average ${loadavg()[0].toFixed(1)} on ${cpus().length} cores when this section started (other work on the machine included)`;
