import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import type { FamilySummary, RunResult } from './evaluate.js';
import {
  FALSE_HEAD,
  falseRateRows,
  HEAD,
  markdownTable,
  poissonUpper95,
  replaceBlock,
  rows,
} from './report.js';

const S = '<!-- eval:start -->';
const E = '<!-- eval:end -->';

const before = '# Detectors\n\nSome prose, with trailing spaces   \r\nand a CRLF line.\n\n';
const after = '\n\nMore prose after the block.\n<!-- sweep:start -->\nsweep stays\n<!-- sweep:end -->\n';
const doc = `${before}${S}\n| old | table |\n| --- | ---: |\n${E}${after}`;

function expectInputError(fn: () => unknown, pattern: RegExp): void {
  let thrown: unknown;
  try {
    fn();
  } catch (err) {
    thrown = err;
  }
  expect(thrown).toBeInstanceOf(RankwatchError);
  expect((thrown as RankwatchError).code).toBe('RANKWATCH_ERR_INPUT');
  expect((thrown as RankwatchError).message).toMatch(pattern);
}

describe('replaceBlock', () => {
  it('replaces exactly the text between the markers and leaves the rest byte-identical', () => {
    const out = replaceBlock(doc, 'eval', 'NEW CONTENT');
    expect(out).toBe(`${before}${S}\nNEW CONTENT\n${E}${after}`);
    expect(out.startsWith(`${before}${S}`)).toBe(true);
    expect(out.endsWith(`${E}${after}`)).toBe(true);
    expect(out).not.toContain('old | table');
  });

  it('only touches the named block', () => {
    const out = replaceBlock(doc, 'sweep', 'NEW SWEEP');
    expect(out).toBe(doc.replace('sweep stays', 'NEW SWEEP'));
    expect(out).toContain('| old | table |');
  });

  it('is idempotent', () => {
    const once = replaceBlock(doc, 'eval', 'a\nb\n');
    expect(replaceBlock(once, 'eval', 'a\nb\n')).toBe(once);
    // Replacing back restores a document already in the canonical shape.
    const canonical = replaceBlock(doc, 'eval', '| old | table |\n| --- | ---: |');
    expect(canonical).toBe(doc);
  });

  it('inserts content with $ patterns literally', () => {
    expect(replaceBlock(doc, 'eval', "$& $1 $$ $'")).toContain(`${S}\n$& $1 $$ $'\n${E}`);
  });

  it('works on an empty block', () => {
    expect(replaceBlock(`x${S}${E}y`, 'eval', 'c')).toBe(`x${S}\nc\n${E}y`);
  });

  it('fails with an input error when a marker is missing', () => {
    expectInputError(() => replaceBlock('no markers here', 'eval', 'x'), /eval:start/);
    expectInputError(() => replaceBlock(`${S}\nonly a start\n`, 'eval', 'x'), /eval:end/);
    expectInputError(() => replaceBlock(`only an end\n${E}\n`, 'eval', 'x'), /eval:start/);
    // Another block's markers do not count.
    expectInputError(() => replaceBlock(doc, 'mfu', 'x'), /mfu:start/);
  });

  it('fails with an input error when the markers are duplicated or out of order', () => {
    // Two whole blocks: updating only the first would leave a stale table behind.
    expectInputError(
      () => replaceBlock(`${S}\na\n${E}\nmid\n${S}\nb\n${E}\n`, 'eval', 'x'),
      /more than once/,
    );
    // A stray second start: replacing up to the end would silently delete it.
    expectInputError(() => replaceBlock(`${S}\na\n${S}\nb\n${E}\n`, 'eval', 'x'), /more than once/);
    expectInputError(() => replaceBlock(`${S}\na\n${E}\nb\n${E}\n`, 'eval', 'x'), /more than once/);
    expectInputError(() => replaceBlock(`${E}\na\n${S}\n`, 'eval', 'x'), /comes before/);
  });

  it('the error is one the CLI reports with code and hint', () => {
    try {
      replaceBlock('nothing', 'eval', 'x');
      expect.unreachable('replaceBlock should have thrown');
    } catch (err) {
      expect((err as RankwatchError).describe()).toMatch(/^RANKWATCH_ERR_INPUT: .*eval:start.*\n {2}\S/);
    }
  });

  it('finds each block of docs/detectors.md exactly once', () => {
    const real = readFileSync(new URL('../docs/detectors.md', import.meta.url), 'utf8');
    for (const name of ['eval', 'eval-false', 'eval-scale', 'sweep']) {
      const out = replaceBlock(real, name, 'X');
      const start = `<!-- ${name}:start -->`;
      const end = `<!-- ${name}:end -->`;
      expect(out.slice(0, out.indexOf(start))).toBe(real.slice(0, real.indexOf(start)));
      expect(out.slice(out.indexOf(end))).toBe(real.slice(real.indexOf(end)));
      expect(replaceBlock(out, name, 'X')).toBe(out);
    }
  });
});

describe('rows and markdownTable', () => {
  const summary: FamilySummary[] = [
    { family: 'clean', runs: 3, detected: 0, falseFindings: 0, rankHours: 1234.4, falsePer1000RankHours: 0 },
    {
      family: 'throttle',
      runs: 4,
      detected: 3,
      recall: 0.75,
      ttdMedianS: 6.25,
      ttdWorstS: 10.06,
      ttdMedianSteps: 5.5,
      ttdWorstSteps: 8,
      costErrorPp: 1.234,
      falseFindings: 2,
      rankHours: 999.6,
      falsePer1000RankHours: 2.0008,
    },
  ];

  it('formats each figure, with a dash for what a clean job lacks', () => {
    expect(rows(summary)).toEqual([
      ['clean', '3', '–', '–', '–', '–', '–', '0', '1,234', '0.00'],
      ['throttle', '4', '3/4 (75%)', '6.3', '10.1', '5.5 / 8', '1.23', '2', '1,000', '2.00'],
    ]);
  });

  it('renders a Markdown table with a header, an alignment row and one row per scenario', () => {
    const md = markdownTable(HEAD, rows(summary)).split('\n');
    expect(md).toHaveLength(2 + summary.length);
    expect(md[0]).toBe(`| ${HEAD.join(' | ')} |`);
    expect(md[1]).toBe(`| --- |${' ---: |'.repeat(HEAD.length - 1)}`);
    expect(md[3]).toBe('| throttle | 4 | 3/4 (75%) | 6.3 | 10.1 | 5.5 / 8 | 1.23 | 2 | 1,000 | 2.00 |');
  });
});

describe('false-finding rates per detector', () => {
  it('bounds a rate of none by the rule of three, and a count by the exact Poisson bound', () => {
    expect(poissonUpper95(0)).toBeCloseTo(-Math.log(0.05), 6);
    // The one-sided 95% Poisson upper limit, chi-square(0.95, 2k + 2) / 2: 4.744, 6.296, 14.43.
    expect(poissonUpper95(1)).toBeCloseTo(4.744, 2);
    expect(poissonUpper95(2)).toBeCloseTo(6.296, 2);
    expect(poissonUpper95(8)).toBeCloseTo(14.43, 1);
  });

  it('counts only clean jobs, per detector and all together, per 10,000 rank-hours', () => {
    const run = (faulty: boolean, rankHours: number, types: string[]): RunResult => ({
      family: faulty ? 'slow' : 'clean',
      ranks: 256,
      seed: 1,
      faulty,
      detected: faulty,
      falseFindings: types.map((type) => ({ type }) as RunResult['falseFindings'][number]),
      rankHours,
      events: 0,
    });
    const body = falseRateRows([
      run(false, 4000, []),
      run(false, 6000, ['mfu_drop']),
      // A faulty job's rank-hours and false findings are not the clean set's.
      run(true, 5000, ['straggler', 'straggler']),
    ]);
    expect(body.map((r) => r[0])).toEqual([
      'straggler',
      'throttle',
      'slow_link',
      'mfu_drop',
      'nccl_hang',
      'recurring_stall',
      'any',
    ]);
    expect(body[0]).toEqual(['straggler', '0', '10,000', '0.00', '≤ 3.00']);
    expect(body[3]).toEqual(['mfu_drop', '1', '10,000', '1.00', '≤ 4.74']);
    expect(body[6].slice(0, 2)).toEqual(['any', '1']);
    expect(markdownTable(FALSE_HEAD, body).split('\n')).toHaveLength(9);
  });

  it('gives no rate and no bound when no clean job ran', () => {
    const faultyOnly: RunResult = {
      family: 'slow',
      ranks: 256,
      seed: 1,
      faulty: true,
      detected: true,
      falseFindings: [],
      rankHours: 100,
      events: 0,
    };
    expect(falseRateRows([faultyOnly]).at(-1)).toEqual(['any', '0', '0', '–', '–']);
  });
});
