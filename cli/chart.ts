/** A one-line text chart (sparkline) with its range, for terminals. */
const BARS = '▁▂▃▄▅▆▇█';

/** At most `width` columns: wider series are averaged into columns first. */
export function sparkline(values: number[], width = 60): string {
  const v = values.filter((x) => Number.isFinite(x));
  if (v.length === 0) return '';
  const cols: number[] = [];
  const per = Math.max(1, v.length / width);
  for (let i = 0; i < v.length; i += per) {
    const part = v.slice(Math.floor(i), Math.max(Math.floor(i) + 1, Math.floor(i + per)));
    cols.push(part.reduce((a, b) => a + b, 0) / part.length);
  }
  const lo = Math.min(...cols);
  const hi = Math.max(...cols);
  return cols
    .map((x) => BARS[hi === lo ? 3 : Math.round(((x - lo) / (hi - lo)) * (BARS.length - 1))])
    .join('');
}
