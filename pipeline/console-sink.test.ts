/** The live lines: place and cost on each, an update only when the cost reads differently, why it ended. */
import { describe, expect, it } from 'vitest';
import type { Finding } from '../schema/finding.js';
import { consoleSink } from './sinks.js';

const f = (over: Partial<Finding>): Finding => ({
  id: 'slow_link-1',
  ts: 0,
  type: 'slow_link',
  state: 'open',
  job: 'j',
  host: 'gpu-0025',
  gpu: 0,
  severity: 'critical',
  evidence: {},
  action: 'cordon',
  est_cost_pct: 4.04,
  summary: 'NIC rail 0 of gpu-0025 is slow; costs the job ~4.0% of its throughput.',
  ...over,
});

describe('console sink', () => {
  it('says each incident’s cost as it moves, and its last line carries the final one', async () => {
    const lines: string[] = [];
    const sink = consoleSink(
      (l) => lines.push(l),
      (x) => String(x.ts),
      false,
    );
    await sink.write([
      f({}),
      f({ state: 'update', ts: 1, est_cost_pct: 4.01 }), // reads 4.0% again: no line
      f({ state: 'update', ts: 2, est_cost_pct: 18.94, summary: 'NIC … ~18.9% of its throughput.' }),
      f({ state: 'resolved', ts: 3, est_cost_pct: 18.9, resolution: 'gpu-0025: job j finished.' }),
    ]);
    expect(lines).toEqual([
      '[0] FOUND    slow_link gpu-0025/0 · cost 4.0%: NIC rail 0 of gpu-0025 is slow; costs the job ~4.0% of its throughput.',
      '[2] UPDATED  slow_link gpu-0025/0 · cost 18.9%: NIC … ~18.9% of its throughput.',
      '[3] RESOLVED slow_link gpu-0025/0 · cost 18.9%: gpu-0025: job j finished.',
    ]);
  });

  it('a finding without a cost or a place says neither; with the job when asked', async () => {
    const lines: string[] = [];
    await consoleSink(
      (l) => lines.push(l),
      () => 't',
    ).write([
      f({ type: 'mfu_drop', host: '', gpu: undefined, est_cost_pct: undefined, summary: 'MFU fell.' }),
    ]);
    expect(lines).toEqual(['[t] FOUND    mfu_drop j: MFU fell.']);
  });
});
