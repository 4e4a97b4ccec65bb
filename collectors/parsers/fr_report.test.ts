import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { looksLikeFrReport, parseFrReport } from './fr_report.js';

const text = (name: string) =>
  readFileSync(join(import.meta.dirname, 'fixtures', 'flight-recorder', name), 'utf8');
const brief = (name: string) =>
  parseFrReport(text(name)).problems.map((p) => [p.fr, p.rank, p.seq, p.pgName, p.pgDesc, p.errorType]);

describe('the Flight Recorder analyzer’s text report', () => {
  it('torch 2.5 spelling (tutorial): "collective 5 at entry 4", expected ranks as a count', () => {
    const { problems, parseProblems } = parseFrReport(text('fr_trace-tutorial-2.5.txt'));
    expect(parseProblems).toEqual([]);
    expect(problems).toEqual([
      {
        fr: 'not_joined',
        rank: 1,
        missingRanks: [1],
        seq: 5,
        pgName: '0',
        pgDesc: 'default_pg',
        opRaw: 'nccl:all_reduce',
        callSite: '<module> at /home/cpio/test/crash.py:44',
      },
    ]);
  });

  it('late-2024 spelling (pytorch#140969): one problem per rank that never joined', () => {
    expect(brief('fr_trace-pr140969.txt')).toEqual(
      [3, 4, 5, 6, 7].map((r) => ['not_joined', r, 31117, '0', 'default_pg', undefined]),
    );
    const [p] = parseFrReport(text('fr_trace-pr140969.txt')).problems;
    expect(p.expectedRanks).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(p.callSite).toMatch(/^sync_buffers at .*gaussian_splatting\.py:650$/);
  });

  it('a TorchComms group name ("main_comm:gloo")', () => {
    expect(brief('fr_trace-torchcomms-gloo.txt')).toEqual([
      ['not_joined', 1, 4, 'main_comm', 'gloo', undefined],
    ]);
  });

  it('mismatches: the culprit rank and the analyzer’s error type and detail', () => {
    expect(brief('fr_trace-gloo-size.txt')).toEqual([
      ['size_mismatch', 1, 5, '0', 'default_pg', 'SIZE_OR_SYNTAX_MISMATCH'],
    ]);
    expect(brief('fr_trace-gloo-dtype.txt')).toEqual([
      ['dtype_mismatch', 1, 5, '0', 'default_pg', 'COLLECTIVE_DTYPE_MISMATCH'],
    ]);
    const [t] = parseFrReport(text('fr_trace-gloo-type.txt')).problems;
    expect(t).toMatchObject({ fr: 'type_mismatch', rank: 1, errorType: 'COLLECTIVE_TYPE_MISMATCH' });
    expect(t.detail).toBe(
      "Expected collective type: 'all_reduce' does not match found collective type: 'broadcast'",
    );
  });

  it('several culprits in one error msg, an unknown error type kept as "other", an all_to_all numel mismatch', () => {
    const report = [
      'Collective sequence number: 12 has errors',
      'group info: 3:dp',
      'collective: nccl:all_gather',
      "error msg: Culprit rank 2; Error type: SIZE_OR_SYNTAX_MISMATCH, Found input numel '12 * pg size 4' does not match output numel '40', Culprit rank 5; Error type: SOME_NEW_ERROR",
      'Input/output mismatch in the collective sequence number: 30',
      'group info: 7',
      'collective: nccl:all_to_all',
      'total input numel: 64',
      'total output numel: 60',
    ].join('\n');
    expect(
      parseFrReport(report).problems.map((p) => [p.fr, p.rank, p.seq, p.pgName, p.errorType, p.detail]),
    ).toEqual([
      [
        'size_mismatch',
        2,
        12,
        '3',
        'SIZE_OR_SYNTAX_MISMATCH',
        "Found input numel '12 * pg size 4' does not match output numel '40'",
      ],
      ['other', 5, 12, '3', 'SOME_NEW_ERROR', undefined],
      [
        'size_mismatch',
        undefined,
        30,
        '7',
        'SIZE_OR_SYNTAX_MISMATCH',
        'total input numel 64 vs total output numel 60',
      ],
    ]);
  });

  it('CRLF and log lines between the report’s lines change nothing', () => {
    expect(brief('fr_trace-crlf.txt')).toEqual(brief('fr_trace-gloo-hang-4ranks.txt'));
    expect(brief('fr_trace-interleaved-logs.txt')).toEqual(brief('fr_trace-gloo-type.txt'));
    expect(parseFrReport(text('fr_trace-interleaved-logs.txt')).parseProblems).toEqual([]);
  });

  it('blocks cut short are problems, not guesses', () => {
    const { problems, parseProblems } = parseFrReport(text('fr_trace-cut.txt'));
    expect(problems).toEqual([]);
    expect(parseProblems.map((p) => [p.line, p.reason])).toEqual([
      [2, 'a "not all ranks joining" block without its missing ranks (cut?)'],
      [6, 'a "has errors" block without its culprit (cut?)'],
    ]);
  });

  it('two reports mixed line by line: nothing is attributed', () => {
    const { problems, parseProblems } = parseFrReport(text('fr_trace-interleaved-runs.txt'));
    expect(problems).toEqual([]);
    expect(parseProblems.map((p) => p.reason)).toEqual([
      'a "not all ranks joining" block without its missing ranks (cut?)',
      '"internal record id" twice in one block: interleaved reports, block skipped',
    ]);
  });

  it('tells a report from other text', () => {
    expect(looksLikeFrReport(text('fr_trace-pr140969.txt'))).toBe(true);
    expect(looksLikeFrReport('loss 2.1 step 10\nNot all ranks are happy')).toBe(false);
  });
});
