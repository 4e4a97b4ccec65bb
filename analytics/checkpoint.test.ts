import { describe, expect, it } from 'vitest';
import { adviseCheckpoint, daly, efficiency, optimalInterval, young } from './checkpoint.js';

describe('Young and Daly intervals, by hand', () => {
  it('Young: √(2δM) with δ = 60 s, M = 3 h', () => {
    // 2 · 60 · 10 800 = 1 296 000; √1 296 000 = 1138.4200
    expect(young(60, 10_800)).toBeCloseTo(1138.42, 2);
  });

  it('Daly, δ < 2M: δ = 60 s, M = 3 h', () => {
    // x = δ/2M = 60/21 600 = 0.00277778; √x = 0.0527046; √x/3 = 0.0175682; x/9 = 0.000308642
    // factor = 1 + 0.0175682 + 0.000308642 = 1.0178768; 1138.4200 · 1.0178768 = 1158.7713; − 60 = 1098.77
    const d = daly(60, 10_800);
    expect(d.branch).toBe('higher_order');
    expect(d.intervalS).toBeCloseTo(1098.77, 1);
  });

  it('Daly reproduces the optima printed in his paper (δ = 5 min, R = 10 min; Figs. 3-5)', () => {
    // M = 24 h: √(2·5·1440) = 120; x = 5/2880 = 0.0017361; 120·(1 + 0.013889 + 0.000193) − 5 = 116.69 ≈ 117 min
    expect(daly(5, 1440).intervalS).toBeCloseTo(116.69, 1);
    // M = 6 h: √(2·5·360) = 60; x = 5/720 = 0.0069444; 60·(1 + 0.027778 + 0.000772) − 5 = 56.71 ≈ 57 min
    expect(daly(5, 360).intervalS).toBeCloseTo(56.71, 1);
    // M = 15 min: √150 = 12.2474; x = 1/6; 12.2474·(1 + 0.136083 + 0.018519) − 5 = 9.141 ≈ 9.1 min
    expect(daly(5, 15).intervalS).toBeCloseTo(9.14, 2);
  });

  it('Daly, δ ≥ 2M: the interval is M', () => {
    // δ = 600 s, M = 300 s: δ = 2M exactly, so the first branch does not apply.
    expect(daly(600, 300)).toEqual({ intervalS: 300, branch: 'mtbf' });
    expect(daly(3600, 600)).toEqual({ intervalS: 600, branch: 'mtbf' });
  });

  it('efficiency: τ / (M·e^(R/M)·(e^((τ+δ)/M) − 1)), by hand', () => {
    // τ = 1000, δ = 100, M = 10 000, R = 0: e^0.11 − 1 = 0.1162781; 1000 / 1162.781 = 0.860007
    expect(efficiency(1000, 100, 10_000)).toBeCloseTo(0.860007, 5);
    // R = 500 multiplies the denominator by e^0.05 = 1.0512711: 0.860007 / 1.0512711 = 0.818064
    expect(efficiency(1000, 100, 10_000, 500)).toBeCloseTo(0.818064, 5);
    // Without failures it tends to τ/(τ+δ).
    expect(efficiency(1000, 100, 1e12)).toBeCloseTo(1000 / 1100, 6);
  });

  it("Daly's estimate lands near the model's exact optimum while δ ≪ M", () => {
    for (const [d, m] of [
      [30, 3 * 3600],
      [60, 11_000],
      [300, 86_400],
    ]) {
      const opt = optimalInterval(d, m);
      expect(Math.abs(daly(d, m).intervalS - opt) / opt).toBeLessThan(0.01);
    }
  });
});

describe('adviseCheckpoint', () => {
  it('advises Daly, compares the current interval, and shows the failure rate halved and doubled', () => {
    const a = adviseCheckpoint({ saveS: 60, mtbfS: 10_800, restartS: 600, intervalS: 4 * 3600 });
    if (!a.ok) throw new Error('expected advice');
    expect(a.recommendedS).toBeCloseTo(1098.77, 1);
    expect(a.efficiencyRecommended).toBeGreaterThan(a.efficiencyCurrent!);
    expect(a.currentLossPct).toBeGreaterThan(5);
    const [halved, doubled] = a.sensitivity;
    expect(halved.mtbfS).toBe(21_600);
    expect(doubled.mtbfS).toBe(5400);
    expect(halved.intervalS).toBeGreaterThan(a.recommendedS);
    expect(doubled.intervalS).toBeLessThan(a.recommendedS);
    // At each rate, its own interval does at least as well as the one advised for the measured rate.
    for (const s of a.sensitivity)
      expect(s.efficiencyAtOwn).toBeGreaterThanOrEqual(s.efficiencyAtAdvised - 1e-9);
  });

  it('says what is missing instead of dividing by zero', () => {
    const none = adviseCheckpoint({});
    expect(none.ok).toBe(false);
    if (none.ok) return;
    expect(none.missing).toEqual(['save time', 'failure rate']);
    expect(none.needs.join(' ')).toMatch(/successful save/);
    const zero = adviseCheckpoint({ saveS: 0, mtbfS: 3600 });
    expect(zero.ok).toBe(false);
    if (!zero.ok) expect(zero.needs[0]).toMatch(/likely a unit or clock problem/);
    const noFailures = adviseCheckpoint({ saveS: 30, mtbfS: Number.POSITIVE_INFINITY });
    expect(noFailures.ok).toBe(false);
    if (!noFailures.ok) expect(noFailures.missing).toEqual(['failure rate']);
  });

  it('counts the non-blocking part of an asynchronous save as extra rollback', () => {
    const a = adviseCheckpoint({ saveS: 5, saveTotalS: 65, mtbfS: 10_800, restartS: 300 });
    if (!a.ok) throw new Error('expected advice');
    expect(a.asyncLagS).toBe(60);
    expect(a.restartS).toBe(360);
    expect(a.recommendedS).toBeCloseTo(daly(5, 10_800).intervalS, 9);
  });
});
