/** Small formatting helpers; every value shown goes through esc() or textContent. */
export const esc = (s: unknown) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export const pct = (x: number | null | undefined, digits = 1) =>
  x === null || x === undefined || !Number.isFinite(x) ? '—' : `${(x * 100).toFixed(digits)}%`;

export const num = (x: number | null | undefined, digits = 0) =>
  x === null || x === undefined || !Number.isFinite(x)
    ? '—'
    : x.toLocaleString(undefined, { maximumFractionDigits: digits, minimumFractionDigits: digits });

export const ms = (x: number | null | undefined) =>
  x === null || x === undefined ? '—' : x >= 10_000 ? `${(x / 1000).toFixed(1)} s` : `${x.toFixed(0)} ms`;

/** Axis ticks for durations in ms: 800 ms, 1.2 s, 10 s. */
export const msTick = (x: number) => (x >= 1000 ? `${+(x / 1000).toFixed(1)} s` : `${+x.toFixed(0)} ms`);

/** Compact counts for axes: 950, 12k, 1.5M. */
export const short = (x: number) =>
  Math.abs(x) >= 1e6
    ? `${+(x / 1e6).toFixed(1)}M`
    : Math.abs(x) >= 1e3
      ? `${+(x / 1e3).toFixed(1)}k`
      : `${+x.toFixed(1)}`;

export function ago(ts: number, now = Date.now()): string {
  const s = Math.max(0, (now - ts) / 1000);
  if (s < 90) return `${s.toFixed(0)} s ago`;
  if (s < 5400) return `${(s / 60).toFixed(0)} min ago`;
  if (s < 172_800) return `${(s / 3600).toFixed(1)} h ago`;
  return `${(s / 86400).toFixed(0)} d ago`;
}

export const time = (ts: number) =>
  new Date(ts).toLocaleString(undefined, {
    month: 'short',
    day: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
  });

/** Bucket width for about `n` points over a span, in whole seconds (at least 10). */
export const bucketFor = (spanMs: number, n = 240) => Math.max(10, Math.ceil(spanMs / 1000 / n / 10) * 10);

/** A CSS custom property of the current theme (charts and canvas follow light/dark). */
export const cssVar = (name: string) =>
  getComputedStyle(document.documentElement).getPropertyValue(name).trim();
