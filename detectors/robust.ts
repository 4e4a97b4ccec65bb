/** Robust location and scale over part of a scratch buffer (reordered in place, never copied). */
import { quickselect } from 'simple-statistics';

const select = quickselect as unknown as (arr: Float64Array, k: number, left: number, right: number) => void;

/** Median of buf[0..n); reorders buf. Upper median for even n (cheap, and n is large here). */
export function medianInPlace(buf: Float64Array, n: number): number {
  if (n === 0) return Number.NaN;
  const mid = n >> 1;
  select(buf, mid, 0, n - 1);
  return buf[mid];
}

/** Median absolute deviation of buf[0..n) around `center`, scaled to sigma for normal data; reorders buf. */
export function madSigmaInPlace(buf: Float64Array, n: number, center: number): number {
  for (let i = 0; i < n; i++) buf[i] = Math.abs(buf[i] - center);
  return 1.4826 * medianInPlace(buf, n);
}
