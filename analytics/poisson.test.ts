import { chiSquaredDistributionTable } from 'simple-statistics';
import { describe, expect, it } from 'vitest';
import { gammaP, gammaQuantile, poissonInterval, rateWithInterval } from './poisson.js';

describe('exact Poisson intervals', () => {
  it('matches the closed forms for 0 and 1 events', () => {
    // k = 0: P(1, x) = 1 − e^−x, so the upper bound solves e^−x = 0.025: x = −ln 0.025 = 3.68888.
    const zero = poissonInterval(0);
    expect(zero.lo).toBe(0);
    expect(zero.hi).toBeCloseTo(-Math.log(0.025), 9);
    // k = 1: the lower bound solves 1 − e^−x = 0.025: x = −ln 0.975 = 0.0253178;
    // the upper bound solves P(2, x) = 1 − e^−x (1 + x) = 0.975.
    const one = poissonInterval(1);
    expect(one.lo).toBeCloseTo(-Math.log(0.975), 9);
    expect(1 - Math.exp(-one.hi) * (1 + one.hi)).toBeCloseTo(0.975, 12);
    expect(one.hi).toBeCloseTo(5.5716, 4);
  });

  it('agrees with the printed χ² table (Hines & Montgomery, in simple-statistics) at every even df', () => {
    // lo(k) = χ²(0.025; 2k)/2 and hi(k) = χ²(0.975; 2k+2)/2. The table is indexed by the upper-tail
    // probability, printed to two decimals, with df 1..30 and then 40..100 by tens.
    const table = chiSquaredDistributionTable as unknown as Record<number, Record<string, number>>;
    let checked = 0;
    for (const df of Object.keys(table).map(Number)) {
      if (df % 2 !== 0) continue;
      const k = df / 2;
      expect(Math.abs(poissonInterval(k).lo - table[df]['0.975'] / 2)).toBeLessThan(0.0051);
      expect(Math.abs(poissonInterval(k - 1).hi - table[df]['0.025'] / 2)).toBeLessThan(0.0051);
      checked++;
    }
    expect(checked).toBe(22);
  });

  it('gives the textbook interval for 10 events (4.795 to 18.390)', () => {
    const ci = poissonInterval(10);
    expect(ci.lo).toBeCloseTo(4.795, 3);
    expect(ci.hi).toBeCloseTo(18.39, 2);
  });

  it('is a true inverse of the incomplete gamma at large counts', () => {
    for (const a of [0.5, 3, 148, 419, 5000]) {
      for (const p of [0.025, 0.5, 0.975]) expect(gammaP(a, gammaQuantile(p, a))).toBeCloseTo(p, 10);
    }
  });

  it('scales to a rate and refuses to divide by no exposure', () => {
    const r = rateWithInterval(419, 16_384 * 54 * 24, 1e6);
    expect(r?.rate).toBeCloseTo((419 / (16_384 * 54 * 24)) * 1e6, 10);
    expect(r!.lo).toBeLessThan(r!.rate);
    expect(r!.hi).toBeGreaterThan(r!.rate);
    expect(rateWithInterval(3, 0)).toBeNull();
  });
});
