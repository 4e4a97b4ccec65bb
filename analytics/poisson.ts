/**
 * Exact (Garwood) Poisson confidence intervals. For k events the two-sided 1−α interval of the
 * mean is [χ²(α/2; 2k)/2, χ²(1−α/2; 2k+2)/2], i.e. the α/2 quantile of Gamma(k, 1) and the 1−α/2
 * quantile of Gamma(k+1, 1). simple-statistics has ln Γ but no inverse incomplete gamma, so the
 * quantile is found here by bisection on the regularized incomplete gamma P(a, x).
 */
import { gammaln } from 'simple-statistics';

/** Regularized lower incomplete gamma P(a, x) = γ(a, x) / Γ(a), for a > 0, x ≥ 0. */
export function gammaP(a: number, x: number): number {
  if (!(a > 0) || !(x >= 0)) throw new RangeError(`gammaP needs a > 0 and x ≥ 0, got a=${a}, x=${x}`);
  if (x === 0) return 0;
  const logPrefix = -x + a * Math.log(x) - gammaln(a);
  if (x < a + 1) {
    // Series: Σ x^n / (a (a+1) … (a+n)), converges fast below a+1.
    let term = 1 / a;
    let sum = term;
    for (let n = 1; n < 10_000; n++) {
      term *= x / (a + n);
      sum += term;
      if (Math.abs(term) < Math.abs(sum) * 1e-16) break;
    }
    return Math.min(1, sum * Math.exp(logPrefix));
  }
  // Continued fraction for Q = 1 − P (modified Lentz), converges fast above a+1.
  const tiny = 1e-300;
  let b = x + 1 - a;
  let c = 1 / tiny;
  let d = 1 / b;
  let h = d;
  for (let i = 1; i < 10_000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const delta = d * c;
    h *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return Math.max(0, 1 - Math.exp(logPrefix) * h);
}

/** The p-quantile of Gamma(shape a, scale 1): the x with P(a, x) = p. */
export function gammaQuantile(p: number, a: number): number {
  if (!(p >= 0 && p < 1)) throw new RangeError(`gammaQuantile needs 0 ≤ p < 1, got ${p}`);
  if (p === 0) return 0;
  let lo = 0;
  let hi = Math.max(1, a + 10 * Math.sqrt(a) + 10);
  while (gammaP(a, hi) < p) hi *= 2;
  // Bisection: monotone and cannot fail; 200 halvings reach double precision.
  for (let i = 0; i < 200 && hi - lo > 1e-14 * hi; i++) {
    const mid = (lo + hi) / 2;
    if (gammaP(a, mid) < p) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

export interface PoissonInterval {
  /** Events counted. */
  count: number;
  /** Lower and upper bound of the mean count. */
  lo: number;
  hi: number;
  /** Confidence level, e.g. 0.95. */
  level: number;
}

/** Exact two-sided interval of a Poisson mean from `count` events. */
export function poissonInterval(count: number, level = 0.95): PoissonInterval {
  if (!Number.isInteger(count) || count < 0)
    throw new RangeError(`count must be an integer ≥ 0, got ${count}`);
  const alpha = 1 - level;
  return {
    count,
    lo: count === 0 ? 0 : gammaQuantile(alpha / 2, count),
    hi: gammaQuantile(1 - alpha / 2, count + 1),
    level,
  };
}

export interface RateEstimate {
  rate: number;
  lo: number;
  hi: number;
}

/** A rate per `per` units of exposure, with its exact interval; null when there is no exposure. */
export function rateWithInterval(
  count: number,
  exposure: number,
  per = 1,
  level = 0.95,
): RateEstimate | null {
  if (!(exposure > 0)) return null;
  const ci = poissonInterval(count, level);
  return { rate: (count / exposure) * per, lo: (ci.lo / exposure) * per, hi: (ci.hi / exposure) * per };
}

/**
 * Below this many events the 95% interval spans more than a factor of ~4 (10 events: 4.8 to 18.4),
 * which is too wide to choose a checkpoint interval from; the interval is still printed.
 */
export const FEW_EVENTS = 10;
