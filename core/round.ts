/** Rounds to `digits` decimals: for figures people read (findings' evidence, summaries). */
export function round(x: number, digits: number): number {
  const p = 10 ** digits;
  return Math.round(x * p) / p;
}
