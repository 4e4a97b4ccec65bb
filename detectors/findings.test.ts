import { describe, expect, it } from 'vitest';
import { costClause } from '../core/figures.js';
import type { Finding } from '../schema/finding.js';
import { FindingLog, findingId, LIFECYCLE_DEFAULTS } from './findings.js';

const draft = (cost: number) => ({
  type: 'straggler',
  job: 'j',
  host: 'h',
  gpu: 1,
  severity: 'warning' as const,
  action: 'watch' as const,
  est_cost_pct: cost,
  evidence: { slowdown_pct: 10 },
  summary: 's',
});

describe('finding lifecycle', () => {
  it('opens once, updates sparingly, resolves once', () => {
    const out: Finding[] = [];
    const log = new FindingLog(out, {
      ...LIFECYCLE_DEFAULTS,
      minUpdateIntervalMs: 60_000,
      updateChange: 0.25,
    });
    const id = findingId('straggler', 'j', 'h', 1, 40);
    log.openFinding(id, 1_000, draft(5));
    log.openFinding(id, 2_000, draft(5)); // redelivered input: no second open
    for (let t = 3_000; t < 300_000; t += 1_000) log.update(id, t, draft(5 + (t % 7_000 === 0 ? 0.1 : 0)));
    expect(out.map((f) => f.state)).toEqual(['open']); // nothing moved: no update flood
    log.update(id, 400_000, draft(9)); // moved by more than 25%, and a minute has passed
    log.update(id, 410_000, draft(20)); // moved again, but too soon
    log.resolve(id, 500_000);
    log.resolve(id, 510_000);
    expect(out.map((f) => [f.state, f.ts])).toEqual([
      ['open', 1_000],
      ['update', 400_000],
      ['resolved', 500_000],
    ]);
    expect(out[2].est_cost_pct).toBe(20); // the resolution carries the latest figures
    expect(new Set(out.map((f) => f.id))).toEqual(new Set([id]));
  });

  it('gives the same id for the same incident, a different one for another', () => {
    expect(findingId('straggler', 'j', 'h', 1, 40)).toBe(findingId('straggler', 'j', 'h', 1, 40));
    expect(findingId('straggler', 'j', 'h', 1, 40)).not.toBe(findingId('straggler', 'j', 'h', 2, 40));
    expect(findingId('throttle', 'j', 'h', undefined, 40)).toMatch(/^throttle-[0-9a-f]{16}$/);
  });

  it('a resolved finding keeps the summary it had while open, says why it ended, and one cost throughout', () => {
    const out: Finding[] = [];
    const log = new FindingLog(out);
    const said = (cost: number) => ({
      ...draft(cost),
      summary: `rank 1 on h/1 is slow and ${costClause(cost)}.`,
    });
    log.openFinding('x', 1_000, said(9.71));
    // A figure patched in without a new sentence (a throttle takes its straggler's cost).
    log.amend('x', { est_cost_pct: 6.04 });
    log.resolve('x', 2_000, { summary: 'h: compute back in line with stage peers.' });
    expect(out[0].summary).toBe('rank 1 on h/1 is slow and costs the job ~9.7% of its throughput.');
    expect(out[1]).toMatchObject({
      state: 'resolved',
      est_cost_pct: 6.04,
      summary: 'rank 1 on h/1 is slow and costs the job ~6.0% of its throughput.',
      resolution: 'h: compute back in line with stage peers.',
    });
  });
});
