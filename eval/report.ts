/** The evaluation as a terminal table or a Markdown table (for docs/detectors.md). */
import { RankwatchError } from '../core/errors.js';
import type { FamilySummary, RunResult } from './evaluate.js';

const f1 = (x: number | undefined) => (x === undefined ? '–' : x.toFixed(1));

export const HEAD = [
  'scenario',
  'runs',
  'recall',
  'TTD median (s)',
  'TTD worst (s)',
  'TTD steps (median / worst)',
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
    s.ttdMedianSteps === undefined ? '–' : `${s.ttdMedianSteps} / ${s.ttdWorstSteps}`,
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

/** Finding types whose false findings are counted, one row each, then all together. */
const FALSE_TYPES = ['straggler', 'throttle', 'slow_link', 'mfu_drop', 'nccl_hang', 'recurring_stall'];

export const FALSE_HEAD = [
  'detector',
  'false findings',
  'clean rank-hours',
  'per 10,000 rank-h',
  '95% upper bound',
];

/**
 * False findings per detector over the clean jobs (no injected fault), per 10,000 rank-hours,
 * with the one-sided 95% Poisson upper bound on the rate: 3/N for none (the rule of three).
 */
export function falseRateRows(results: RunResult[]): string[][] {
  const clean = results.filter((r) => !r.faulty);
  const rankHours = clean.reduce((n, r) => n + r.rankHours, 0);
  const per10k = (k: number) => (1e4 * k) / rankHours;
  // No clean job (the scale matrix): no rate, rather than a bound of 0 that cannot be true.
  const row = (name: string, k: number) => [
    name,
    String(k),
    Math.round(rankHours).toLocaleString('en-US'),
    rankHours > 0 ? per10k(k).toFixed(2) : '–',
    rankHours > 0 ? `≤ ${per10k(poissonUpper95(k)).toFixed(2)}` : '–',
  ];
  const count = (t?: string) =>
    clean.reduce((n, r) => n + r.falseFindings.filter((f) => t === undefined || f.type === t).length, 0);
  return [...FALSE_TYPES.map((t) => row(t, count(t))), row('any', count())];
}

/** The mean whose chance of k or fewer events is 5%: the one-sided 95% upper bound (k = 0: ~3). */
export function poissonUpper95(k: number): number {
  const cdf = (mu: number) => {
    let term = Math.exp(-mu);
    let sum = term;
    for (let i = 1; i <= k; i++) {
      term *= mu / i;
      sum += term;
    }
    return sum;
  };
  let lo = 0;
  let hi = k + 10 + 10 * Math.sqrt(k + 1);
  for (let i = 0; i < 100; i++) {
    const mid = (lo + hi) / 2;
    if (cdf(mid) > 0.05) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}
