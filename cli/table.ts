/** A plain table for terminals (cli-table3, no colour so it pipes cleanly). */
import Table from 'cli-table3';

export function table(head: string[], rows: (string | number)[][]): string {
  const t = new Table({ head, style: { head: [], border: [] } });
  for (const r of rows) t.push(r.map((c) => String(c)));
  return t.toString();
}
