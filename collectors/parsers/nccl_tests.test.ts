import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { ncclTestCheck, parseNcclTests, startsRun, stripPrefixes } from './nccl_tests.js';

const fixture = (name: string) => readFileSync(join(import.meta.dirname, 'fixtures', name), 'utf8');
const series = (r: ReturnType<typeof parseNcclTests>) =>
  r.rows.filter((x) => !x.inPlace).map((x) => [x.bytes, x.busbwGBs]);

describe('nccl-tests output → one check per run', () => {
  it('reads mpirun --tag-output rows, also where a tag sits inside a row (aws-k8s-tester#503)', () => {
    const r = parseNcclTests(fixture('nccl-tests-tag-output.txt'));
    expect(r.problems).toEqual([]);
    expect(r.complete).toBe(true);
    expect(r.avgBusBwGBs).toBeCloseTo(92.3405);
    expect(r.outOfBounds).toBe(0);
    expect(r.rows).toHaveLength(8);
    expect(r.rows[6]).toEqual({
      bytes: 16,
      count: 4,
      dtype: 'float',
      redop: 'sum',
      inPlace: false,
      timeUs: 12.88,
      algbwGBs: 0,
      busbwGBs: 0,
      wrong: 0,
    });
    const check = ncclTestCheck(r, { ts: 1, host: 'p5-a', test: 'all_reduce_perf' })!;
    expect(validateEvent(check).ok).toBe(true);
    expect(check).toMatchObject({ kind: 'check', tool: 'nccl-tests', ok: true, host: 'p5-a', wrong: 0 });
  });

  it('reads srun -l labels: hosts from the rank lines, rows, summary (soperator#428, dstack#3961)', () => {
    const r = parseNcclTests(fixture('nccl-tests-srun-label.txt'));
    expect(r.problems).toEqual([]);
    expect(r.test).toBeUndefined();
    expect(r.hosts).toEqual(['worker-0', 'worker-1']);
    expect(r.ranks.map((x) => x.rank)).toEqual([0, 1, 8, 9]);
    expect(series(r)).toEqual([
      [8, 0],
      [16, 0],
      [4096, 0.12],
      [8192, 0.23],
    ]);
    expect(r.complete).toBe(true);
    const check = ncclTestCheck(r, { ts: 5, test: 'all_reduce_perf' })!;
    expect(check).toMatchObject({
      host: 'worker-0',
      hosts: ['worker-0', 'worker-1'],
      nranks: 4,
      gpu_name: 'NVIDIA H100 80GB HBM3',
    });
  });

  it('reads kubectl --timestamps lines with tabs, skips NCCL INFO between rows, marks the run cut off (cluster-toolkit#3644)', () => {
    const r = parseNcclTests(fixture('nccl-tests-k8s-timestamps.txt'));
    expect(r.problems).toEqual([]);
    expect(r.rows).toHaveLength(22);
    expect(series(r).at(-1)).toEqual([2147483648, 185.48]);
    expect(r.rows.find((x) => x.bytes === 8388608 && !x.inPlace)?.busbwGBs).toBe(22.07);
    expect(r.complete).toBe(false);
    const check = ncclTestCheck(r, { ts: 1, host: 'gke-node-1', test: 'alltoall_perf' })!;
    expect(check).toMatchObject({ ok: false, complete: false, busbw_gbs: 185.8, test: 'alltoall_perf' });
    expect(validateEvent(check).ok).toBe(true);
  });

  it('reads the older `error` column as a max relative error, not a count; CRLF; a cut-off row (NPKit#19)', () => {
    const r = parseNcclTests(fixture('nccl-tests-error-column.txt'));
    expect(r.hosts).toEqual(['gpu9']);
    expect(r.rows.map((x) => [x.bytes, x.inPlace, x.maxRelError, x.wrong])).toEqual([
      [8, false, 1e-7, undefined],
      [8, true, 0, undefined],
      [16, false, 3e-8, undefined],
      [16, true, 3e-8, undefined],
      [32, false, 3e-8, undefined],
      [32, true, 3e-8, undefined],
    ]);
    expect(r.problems.map((p) => [p.line, p.reason])).toEqual([
      [18, 'expected 12 columns, got 9 (a cut-off row?)'],
    ]);
    expect(r.complete).toBe(false);
    const check = ncclTestCheck(r, { ts: 1 })!;
    expect(check).toMatchObject({ ok: false, max_rel_error: 1e-7 });
    expect(check.wrong).toBeUndefined();
  });

  it('counts #wrong (N/A is no count) and out-of-bounds values: the check is not ok (nccl-tests#287, nccl#2001)', () => {
    const r = parseNcclTests(fixture('nccl-tests-wrong.txt'));
    expect(r.problems).toEqual([]);
    expect(r.rows.map((x) => x.wrong)).toEqual([12, undefined, 0, undefined]);
    expect(r.outOfBounds).toBe(12);
    const check = ncclTestCheck(r, { ts: 1, test: 'alltoall_perf' })!;
    expect(check).toMatchObject({ ok: false, wrong: 12, out_of_bounds: 12, host: 'GENOA-01' });
  });

  it('strips launcher and shipper prefixes, and knows where a run starts', () => {
    expect(stripPrefixes('2024-11-05T10:00:00.123Z [1,0]<stdout>:#  Rank  0')).toBe('#  Rank  0');
    expect(stripPrefixes('12: # Avg bus bandwidth : 1')).toBe('# Avg bus bandwidth : 1');
    expect(stripPrefixes('        8192          2048     float')).toBe(
      '        8192          2048     float',
    );
    expect(startsRun('0: # nThread 1 nGpus 1 minBytes 8')).toBe(true);
    expect(startsRun('# Collective test starting: all_reduce_perf')).toBe(true);
    expect(startsRun('#  Rank  0 Group  0 Pid 1 on a device 0 [0x1] H100')).toBe(false);
  });

  it('says so when every process ran its own test instead of one run over all hosts (nccl-tests#107)', () => {
    const r = parseNcclTests(
      [
        '# nThread 1 nGpus 1 minBytes 1310720000 maxBytes 1310720000 step: 1048576(bytes) warmup iters: 5 iters: 20 validation: 1',
        '#   Rank  0 Pid   1320 on ip-172-31-20-228 device  0 [0x00] Tesla V100-SXM2-16GB',
        '#   Rank  0 Pid   2066 on ip-172-31-22-230 device  0 [0x00] Tesla V100-SXM2-16GB',
      ].join('\n'),
    );
    expect(r.problems.map((p) => p.reason)).toEqual([
      'no result row of this nccl-tests run could be read: rank 0 listed twice: each process ran its own test (nccl-tests built without MPI=1?)',
    ]);
  });

  describe('NVIDIA/nccl#1453: rank tags inside the columns, header cut off', () => {
    const text = fixture('nccl-tests-1453-tagged.txt');
    const debug = fixture('nccl-tests-1453-debug.txt');
    // The rows, bus bandwidth per size (out-of-place), read off the fixture by hand.
    const EXPECTED = [
      [1048576, 1.24],
      [2097152, 1.73],
      [4194304, 12.91],
      [8388608, 16.2],
      [16777216, 24.09],
      [33554432, 29.5],
      [67108864, 5.27],
      [134217728, 5.22],
      [268435456, 4.09],
      [536870912, 5.31],
    ];

    it('reads every whole row by its size/count/type run; the two cut pieces are problems', () => {
      const r = parseNcclTests(text);
      expect(series(r)).toEqual(EXPECTED);
      expect(r.rows).toHaveLength(20);
      expect(r.rows.find((x) => x.bytes === 67108864 && x.inPlace)).toEqual({
        bytes: 67108864,
        count: 16777216,
        dtype: 'float',
        redop: 'sum',
        inPlace: true,
        timeUs: 24425,
        algbwGBs: 2.75,
        busbwGBs: 5.27,
        wrong: 0,
      });
      expect(r.problems.map((p) => [p.line, p.reason])).toEqual([
        [7, 'numbers without the size, count and type of a row: a row cut off or split'],
        [18, 'numbers without the size, count and type of a row: a row cut off or split'],
      ]);
      expect(r.complete).toBe(false);
      const check = ncclTestCheck(r, { ts: 1, host: 'h100clust-worker-1' })!;
      expect(validateEvent(check).ok).toBe(true);
      expect(check).toMatchObject({ kind: 'check', ok: false, complete: false, busbw_gbs: 29.5, wrong: 0 });
    });

    it('damaged: CRLF, other prefixes before the tags, NCCL INFO lines inside a row, cut mid-row', () => {
      const crlf = parseNcclTests(text.replaceAll('\n', '\r\n'));
      expect(series(crlf)).toEqual(EXPECTED);
      expect(crlf.problems).toHaveLength(2);

      const prefixed = text
        .split('\n')
        .map((l) => (l.startsWith('[0]') ? `2024-09-18T14:02:11Z h100clust-worker-1: ${l}` : l))
        .join('\n');
      expect(series(parseNcclTests(prefixed))).toEqual(EXPECTED);

      // As #1453's debug run prints it: the row's start, then NCCL INFO flushed onto the same line,
      // more INFO lines, then the out-of-place and in-place parts on lines of their own.
      const info = debug
        .split('\n')
        .find((l) => l.startsWith('[0] h100clust-worker-1:'))!
        .slice(4);
      const split = text.replace(
        /(\[0\] {5}67108864 .*?-1)(\[0\] .*?0)(\[0\] .*)/,
        `$1[0] ${info}\n[0] ${info}\n[0] ${info}\n$2\n$3`,
      );
      expect(split.split('\n').length).toBe(text.split('\n').length + 4);
      const interleaved = parseNcclTests(split);
      expect(series(interleaved)).toEqual(EXPECTED);
      expect(interleaved.problems).toHaveLength(2);

      const cut = parseNcclTests(text.slice(0, text.indexOf('24410    2.75') + 13));
      expect(series(cut)).toEqual(EXPECTED.slice(0, 6));
      expect(cut.problems.at(-1)).toMatchObject({
        line: 14,
        reason: 'expected 13 columns, got 7 (a cut-off row?)',
      });
    });

    it('a run none of whose rows can be read is one problem with its reason, and no check', () => {
      const r = parseNcclTests(debug);
      expect(r.hosts).toEqual(['h100clust-worker-1', 'h100clust-worker-32']);
      expect(r.ranks).toHaveLength(14);
      expect(r.rows).toEqual([]);
      expect(r.problems).toEqual([
        {
          line: 23,
          reason:
            'no result row of this nccl-tests run could be read: numbers without the size, count and type of a row: a row cut off or split (and 1 more)',
          raw: '[0]    189960    2.83    5.42      0',
        },
      ]);
      expect(ncclTestCheck(r, { ts: 1 })).toBeUndefined();
    });
  });

  it('a data type it does not know yet is still a row when a redop or a number follows it', () => {
    const r = parseNcclTests(
      fixture('nccl-tests-tag-output.txt')
        .replaceAll(' float ', ' f4e2m1 ')
        .replaceAll(' float[', ' f4e2m1['),
    );
    expect(r.rows).toHaveLength(8);
    expect(r.rows[0]).toMatchObject({ bytes: 8, dtype: 'f4e2m1', redop: 'sum' });
    // NCCL INFO numbers are no row: no type-like word between them and a number.
    expect(
      parseNcclTests('host:1:2 [0] NCCL INFO 1073741824 Bytes -> Algo 1 proto 2 time 11038.5\n').rows,
    ).toEqual([]);
  });

  it('survives garbage: nothing but real rows is a row, and no run is no check', () => {
    const r = parseNcclTests('\u0000\u0001 binary junk\n#\n   \n1 2 3\nNCCL WARN Cuda failure\n');
    expect(r.rows).toEqual([]);
    expect(r.problems).toHaveLength(1);
    expect(ncclTestCheck(r, { ts: 1 })).toBeUndefined();
  });
});
