import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { ncclTestEvents, parseNcclTests } from './nccl_tests.js';

const fixture = (name: string) => readFileSync(join(import.meta.dirname, 'fixtures', name), 'utf8');

describe('nccl-tests output → link-probe results', () => {
  it('reads all_reduce_perf: hosts, out-of-place and in-place rows, average bus bandwidth', () => {
    const r = parseNcclTests(fixture('nccl-tests-all_reduce.txt'));
    expect(r.problems).toEqual([]);
    expect(r.test).toBe('all_reduce_perf');
    expect(r.hosts).toEqual(['gpu-0001', 'gpu-0002']);
    expect(r.ranks).toHaveLength(4);
    expect(r.rows).toHaveLength(8);
    expect(r.rows[6]).toEqual({
      bytes: 8589934592,
      count: 2147483648,
      dtype: 'float',
      redop: 'sum',
      inPlace: false,
      timeUs: 67012.3,
      algbwGBs: 128.18,
      busbwGBs: 192.28,
      wrong: 0,
    });
    expect(r.rows[7].inPlace).toBe(true);
    expect(r.avgBusBwGBs).toBeCloseTo(88.2853);
    expect(r.outOfBounds).toBe(0);
    const events = ncclTestEvents(r, { ts: 1 });
    expect(events).toHaveLength(8);
    for (const e of events) expect(validateEvent(e).ok).toBe(true);
    expect(events[6]).toMatchObject({
      kind: 'collective',
      op: 'allreduce',
      probe: true,
      host: 'gpu-0001',
      hosts: ['gpu-0001', 'gpu-0002'],
      comm: 'probe:all_reduce:gpu-0001,gpu-0002',
      job: 'probe:gpu-0001,gpu-0002',
      nranks: 4,
      bytes: 8589934592,
      busbw_gbps: 192.28,
    });
    expect(events[6].dur_ms).toBeCloseTo(67.0123);
  });

  it('reads the older layout (no root, "error" column, N/A when validation is off) and reports the truncated row', () => {
    const r = parseNcclTests(fixture('nccl-tests-legacy-alltoall.txt'));
    expect(r.hosts).toEqual(['dgx-a-04']);
    expect(r.rows.map((x) => [x.bytes, x.inPlace, x.busbwGBs, x.wrong])).toEqual([
      [1048576, false, 14.96, undefined],
      [1048576, true, 15.07, undefined],
      [4194304, false, 37.37, undefined],
      [4194304, true, 37.64, undefined],
    ]);
    expect(r.problems.map((p) => p.line)).toEqual([11, 12]);
    const events = ncclTestEvents(r, { ts: 1, test: 'alltoall_perf' });
    expect(events[0].op).toBe('alltoall');
  });

  it('survives garbage', () => {
    const r = parseNcclTests('\u0000\u0001 binary junk\n#\n   \n1 2 3\n');
    expect(r.rows).toEqual([]);
    expect(r.problems).toHaveLength(2);
  });
});
