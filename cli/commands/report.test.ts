/** The report's text: figures that cannot be true are named as such, charts span their range. */
import { describe, expect, it } from 'vitest';
import { sparkline } from '../chart.js';
import { type JobReport, renderReport } from './report.js';

const base = (over: Partial<JobReport['summary']> = {}): JobReport => ({
  step_s: 60,
  summary: {
    job: 'j',
    status: 'running',
    first_ts: Date.UTC(2026, 0, 1),
    last_ts: Date.UTC(2026, 0, 1, 1),
    ranks: 8,
    world_size: 8,
    gpu_model: 'H100-SXM',
    last_step: 100,
    mfu_now: 0.41,
    mfu_avg: 0.4,
    step_ms: 1000,
    compute_ms: 800,
    tokens_per_s: null,
    hosts: ['a', 'b'],
    findings: [],
    ...over,
  },
  mfu: [0.4, 0.42, 0.38].map((mfu, i) => ({ ts: i * 60_000, mfu, step_ms: 1000, tokens_per_s: null })),
  steps: [],
});

describe('renderReport', () => {
  it('shows MFU as a share and says when the job reports no tokens', () => {
    const text = renderReport(base());
    expect(text).toMatch(/MFU\s+41\.0% now, 40\.0% average/);
    expect(text).toMatch(/tokens\/s\s+- \(the job reports no tokens\)/);
    expect(text).toMatch(/MFU\s+\S+\s+38\.0% \.\. 42\.0%/);
  });

  it('an MFU over 100% is not shown as a figure: it names the inputs that are likely wrong', () => {
    const text = renderReport(base({ mfu_now: 1.4, mfu_avg: 1.3 }));
    expect(text).toMatch(/MFU 140\.0% cannot be true: check the job event's gpu_model, dtype and model/);
    expect(text).not.toMatch(/140\.0% now/);
  });

  it('lists flagged hosts first', () => {
    const text = renderReport(
      base({
        hosts: ['a', 'b'],
        findings: [
          {
            id: 'x',
            ts: 0,
            type: 'throttle',
            state: 'open',
            host: 'b',
            gpu: 3,
            severity: 'critical',
            evidence: { sm_clock_mhz: 1500 },
            action: 'cordon',
            summary: 's',
            est_cost_pct: 9,
          },
        ],
      }),
    );
    expect(text.indexOf('│ b ')).toBeLessThan(text.indexOf('│ a '));
    expect(text).toContain('throttle b/3: sm_clock_mhz=1500');
  });
});

describe('sparkline', () => {
  it('maps the lowest value to the lowest bar and the highest to the highest', () => {
    expect(sparkline([1, 2, 3])).toBe('▁▅█');
    expect(sparkline([5, 5])).toBe('▄▄');
    expect(sparkline([])).toBe('');
  });

  it('averages a long series into at most `width` columns', () => {
    expect([
      ...sparkline(
        Array.from({ length: 600 }, (_, i) => i),
        60,
      ),
    ]).toHaveLength(60);
  });
});
