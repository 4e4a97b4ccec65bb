/** The evaluation as a terminal table or a Markdown table (for docs/detectors.md). */
import { RankwatchError } from '../core/errors.js';
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

/**
 * Replaces the text between `<!-- name:start -->` and `<!-- name:end -->` in a document. The
 * markers must appear once each, start before end; anything else is an input error, not a guess.
 */
export function replaceBlock(doc: string, name: string, content: string): string {
  const start = `<!-- ${name}:start -->`;
  const end = `<!-- ${name}:end -->`;
  const i = doc.indexOf(start);
  const j = doc.indexOf(end);
  if (i < 0 || j < 0) {
    const missing = [i < 0 ? start : '', j < 0 ? end : ''].filter(Boolean).join(' and ');
    throw new RankwatchError('RANKWATCH_ERR_INPUT', `the document has no ${missing} marker`);
  }
  for (const [marker, at] of [
    [start, i],
    [end, j],
  ] as const) {
    const again = doc.indexOf(marker, at + 1);
    if (again >= 0)
      throw new RankwatchError(
        'RANKWATCH_ERR_INPUT',
        `the document has ${marker} more than once (lines ${lineOf(doc, at)} and ${lineOf(doc, again)})`,
      );
  }
  if (j < i)
    throw new RankwatchError(
      'RANKWATCH_ERR_INPUT',
      `${end} (line ${lineOf(doc, j)}) comes before ${start} (line ${lineOf(doc, i)})`,
    );
  return `${doc.slice(0, i + start.length)}\n${content}\n${doc.slice(j)}`;
}

function lineOf(doc: string, index: number): number {
  return doc.slice(0, index).split('\n').length;
}
