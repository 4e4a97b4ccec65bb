/** The evaluation as a terminal table or a Markdown table (for docs/detectors.md). */
import type { FamilySummary } from './evaluate.js';

const f1 = (x: number | undefined) => (x === undefined ? '–' : x.toFixed(1));

export const HEAD = [
  'scenario',
  'runs',
  'recall',
  'TTD median (s)',
  'TTD worst (s)',
  'cost error (pp)',
  'false findings',
  'rank-hours',
  'false / 1000 rank-h',
];

export function rows(summary: FamilySummary[]): string[][] {
  return summary.map((s) => [
    s.family,
    String(s.runs),
    s.recall === undefined ? '–' : `${s.detected}/${s.runs} (${Math.round(s.recall * 100)}%)`,
    f1(s.ttdMedianS),
    f1(s.ttdWorstS),
    s.costErrorPp === undefined ? '–' : s.costErrorPp.toFixed(2),
    String(s.falseFindings),
    Math.round(s.rankHours).toLocaleString('en-US'),
    s.falsePer1000RankHours.toFixed(2),
  ]);
}

export function markdownTable(head: string[], body: string[][]): string {
  return [
    `| ${head.join(' | ')} |`,
    `| ${head.map((_, i) => (i === 0 ? '---' : '---:')).join(' | ')} |`,
    ...body.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

/** Replaces the text between `<!-- name:start -->` and `<!-- name:end -->` in a document. */
export function replaceBlock(doc: string, name: string, content: string): string {
  const start = `<!-- ${name}:start -->`;
  const end = `<!-- ${name}:end -->`;
  const i = doc.indexOf(start);
  const j = doc.indexOf(end);
  if (i < 0 || j < i) throw new Error(`the document has no ${start} ... ${end} block`);
  return `${doc.slice(0, i + start.length)}\n${content}\n${doc.slice(j)}`;
}
