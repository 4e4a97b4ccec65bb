import { describe, expect, it } from 'vitest';
import { savedMs } from './straggler.js';

/** One step's slowest hosts and ranks, as StragglerDetector measures them, from (host, compute) pairs. */
function maxima(ranks: [string, number][], stepMs: number) {
  const byHost = new Map<string, number>();
  for (const [h, c] of ranks) byHost.set(h, Math.max(byHost.get(h) ?? 0, c));
  const hosts = [...byHost].sort((a, b) => b[1] - a[1]);
  const order = ranks.map((x, r) => [r, x[1]] as const).sort((a, b) => b[1] - a[1]);
  return {
    top: hosts[0][0],
    topMs: hosts[0][1],
    secondMs: hosts[1]?.[1] ?? 0,
    hosts: hosts.length,
    topRank: order[0][0],
    topRankMs: order[0][1],
    secondRankMs: order[1]?.[1] ?? 0,
    stepMs,
  };
}

describe('straggler cost: the step time saved had the culprit run like its peers', () => {
  it('one host: the lead over the other ranks, not the whole compute time', () => {
    const ranks: [string, number][] = Array.from({ length: 8 }, (_, r) => ['h0', r === 3 ? 1050 : 1000 + r]);
    const m = maxima(ranks, 1100);
    // Without rank 3 the job waits for rank 7 (1007 ms): 43 ms of a 1100 ms step, ~3.9%.
    expect(savedMs(3, 'h0', 1050, 1003, m)).toBeCloseTo(43, 6);
    // A rank that is not the slowest saves nothing.
    expect(savedMs(5, 'h0', 1005, 1003, m)).toBe(0);
  });

  it('two hosts: the lead over the slowest rank of the other host', () => {
    const ranks: [string, number][] = [
      ...Array.from({ length: 8 }, (_, r): [string, number] => ['h0', r === 3 ? 1300 : 1000]),
      ...Array.from({ length: 8 }, (): [string, number] => ['h1', 1020]),
    ];
    const m = maxima(ranks, 1400);
    expect(savedMs(3, 'h0', 1300, 1005, m)).toBeCloseTo(280, 6);
  });

  it('every other host also slow: little or nothing, as the others would still set the pace', () => {
    const ranks: [string, number][] = [
      ['h0', 1100],
      ['h0', 1000],
      ['h1', 1090],
      ['h1', 1000],
      ['h2', 1095],
      ['h2', 1000],
    ];
    const m = maxima(ranks, 1200);
    expect(savedMs(0, 'h0', 1100, 1000, m)).toBeCloseTo(5, 6);
    expect(savedMs(2, 'h1', 1090, 1000, m)).toBe(0);
  });

  it('many hosts with a costlier stage elsewhere: a slow rank in a cheap stage that still finishes first costs 0', () => {
    const ranks: [string, number][] = Array.from({ length: 64 }, (_, r) => [
      `h${r >> 3}`,
      r === 10 ? 1080 : r >= 48 ? 1120 : 1000,
    ]);
    const m = maxima(ranks, 1250);
    expect(savedMs(10, 'h1', 1080, 1000, m)).toBe(0);
  });

  it('never measures the culprit against less than its own peers, and never saves the whole step', () => {
    // One host, every other rank in a cheaper stage: the floor is the culprit's own stage median.
    const ranks: [string, number][] = [
      ['h0', 2000],
      ['h0', 500],
      ['h0', 500],
    ];
    expect(savedMs(0, 'h0', 2000, 1800, maxima(ranks, 2100))).toBeCloseTo(200, 6);
    // A wall step shorter than the compute (inconsistent input): bounded by the step less the peers' time.
    const saved = savedMs(0, 'h0', 2000, 1000, maxima(ranks, 1500));
    expect(saved).toBe(500);
    expect(saved).toBeLessThan(1500);
    expect(savedMs(0, 'h0', 2000, 1000, maxima(ranks, 900))).toBe(0);
  });
});
