/**
 * A plain table for terminals (cli-table3, no colour so it pipes cleanly). On a terminal it fits
 * the terminal's width: the widest columns are narrowed to one shared cap and their cells wrap at
 * word boundaries (a word longer than its column ends in …); narrower columns keep their width.
 * Piped, or when it fits, the table is as wide as its cells.
 */
import Table from 'cli-table3';

/** Narrowest a column is made (its cells' own width when that is less). */
const MIN_COLUMN = 8;

export function table(
  head: string[],
  rows: (string | number)[][],
  /** The terminal's columns; null: as wide as the cells (piped). */
  width: number | null = process.stdout.isTTY ? process.stdout.columns : null,
): string {
  const cells = rows.map((r) => r.map((c) => String(c)));
  const colWidths = width ? fitted(head, cells, width) : undefined;
  const t = new Table({
    head,
    style: { head: [], border: [] },
    ...(colWidths ? { colWidths, wordWrap: true } : {}),
  });
  for (const r of cells) t.push(r);
  return t.toString();
}

/** Column widths (padding included) that fit `width`, or undefined when the cells fit as they are. */
function fitted(head: string[], rows: string[][], width: number): number[] | undefined {
  const natural = head.map((h, i) => Math.max(longestLine(h), ...rows.map((r) => longestLine(r[i] ?? ''))));
  // Each column has a space either side, and there is one border more than columns.
  const room = width - (head.length + 1) - 2 * head.length;
  const total = natural.reduce((a, b) => a + b, 0);
  if (total <= room) return undefined;
  // The largest cap with sum(min(natural, cap)) within room: the widest columns give way first.
  let cap = Math.max(...natural);
  while (cap > MIN_COLUMN && natural.reduce((a, n) => a + Math.min(n, cap), 0) > room) cap--;
  return natural.map((n) => Math.min(n, cap) + 2);
}

function longestLine(text: string): number {
  return Math.max(...text.split('\n').map((l) => l.length));
}
