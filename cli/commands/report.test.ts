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
  slowGpus: [],
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

describe('the slowest GPUs section', () => {
  const gpu = (rank: number, host: string, slowdown: number, cost: number) => ({
    job: 'j',
    ts: 0,
    step: 96,
    rank,
    host,
    gpu: rank % 8,
    stage: 3,
    slowdown_pct: slowdown,
    cost_pct: cost,
    gpu_hours_per_day: (cost / 100) * 8 * 24,
    steps: 80,
  });

  it('lists the GPU the job waits for first, and what replacing it would buy', () => {
    const text = renderReport({ ...base(), slowGpus: [gpu(5, 'b', 7.2, 1.4), gpu(2, 'a', 6.1, 0)] });
    expect(text).toContain("Slowest GPUs (the job's latest ranking, at step 96)");
    expect(text.indexOf('│ b/5 ')).toBeLessThan(text.indexOf('│ a/2 '));
    expect(text).toMatch(/│ b\/5 +│ 5 +│ 3 +│ \+7\.2% +│ 1\.40% +│ 2\.7 +│/);
    expect(text).toContain("replacing b/5 would buy ~1.4% of the job's throughput");
  });

  it('says when no GPU sets the pace, and when the job has no ranking yet', () => {
    expect(renderReport({ ...base(), slowGpus: [gpu(2, 'a', 1.1, 0)] })).toContain('None sets the pace');
    expect(renderReport(base())).toContain('Slowest GPUs: no ranking yet');
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
