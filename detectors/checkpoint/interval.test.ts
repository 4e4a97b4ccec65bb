import { Value } from '@sinclair/typebox/value';
import { describe, expect, it } from 'vitest';
import { adviseCheckpoint } from '../../analytics/checkpoint.js';
import { Finding } from '../../schema/finding.js';
import { checkpointIntervalFinding } from './interval.js';

describe('checkpoint_interval finding', () => {
  const advise = (intervalS: number) => {
    const a = adviseCheckpoint({ saveS: 60, mtbfS: 10_800, restartS: 600, intervalS });
    if (!a.ok) throw new Error('expected advice');
    return a;
  };

  it('fires when the current interval gives up more than the set share of goodput', () => {
    const f = checkpointIntervalFinding('llm-1', advise(4 * 3600), 1_000);
    expect(f).toBeDefined();
    expect(Value.Check(Finding, f)).toBe(true);
    expect(f!.type).toBe('checkpoint_interval');
    expect(f!.est_cost_pct).toBeGreaterThan(5);
    expect(f!.action).toBe('none');
    expect(f!.summary).toMatch(/too much work lost per failure/);
    expect(checkpointIntervalFinding('llm-1', advise(60), 1_000)!.summary).toMatch(
      /too much time spent saving/,
    );
  });

  it('stays quiet near the optimum and without a known current interval', () => {
    expect(checkpointIntervalFinding('llm-1', advise(1100), 1_000)).toBeUndefined();
    const a = adviseCheckpoint({ saveS: 60, mtbfS: 10_800 });
    if (!a.ok) throw new Error('expected advice');
    expect(checkpointIntervalFinding('llm-1', a, 1_000)).toBeUndefined();
  });
});
