/**
 * Grafana's variables and the ClickHouse plugin's macros, expanded the way they are before a
 * panel's SQL reaches ClickHouse, so the tests run exactly what Grafana would send. Macros follow
 * grafana/clickhouse-datasource pkg/macros/macros.go ($__timeFilter: `c >= toDateTime(from) AND
 * c <= toDateTime(to)` in unix seconds; $__timeInterval: toStartOfInterval over the panel's
 * interval, at least 1 s); `${name:singlequote}` is Grafana's quoting of each value, comma-joined.
 */
export interface Expansion {
  /** Dashboard time range, epoch ms. */
  from: number;
  to: number;
  /** The panel's interval, seconds. */
  intervalSeconds: number;
  /** Template variable values (several for a multi-value variable). */
  vars: Record<string, string[]>;
}

const sec = (ms: number) => Math.floor(ms / 1000);
const quote = (v: string) => `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

export function expand(sql: string, e: Expansion): string {
  const iv = Math.max(1, Math.floor(e.intervalSeconds));
  const out = sql
    .replace(
      /\$__timeFilter\(\s*(\w+)\s*\)/g,
      (_m, c) => `${c} >= toDateTime(${sec(e.from)}) AND ${c} <= toDateTime(${sec(e.to)})`,
    )
    .replace(
      /\$__timeInterval\(\s*(\w+)\s*\)/g,
      (_m, c) => `toStartOfInterval(toDateTime(${c}), INTERVAL ${iv} second)`,
    )
    .replace(/\$__fromTime\b/g, `toDateTime(${sec(e.from)})`)
    .replace(/\$__toTime\b/g, `toDateTime(${sec(e.to)})`)
    .replace(/\$__interval_s\b/g, String(iv))
    .replace(/\$\{(\w+):singlequote\}/g, (_m, name: string) => {
      const vals = e.vars[name];
      if (!vals) throw new Error(`no value for the variable \${${name}}`);
      return vals.map(quote).join(',');
    });
  const left = /\$__\w+|\$\{[^}]+\}/.exec(out);
  if (left) throw new Error(`unexpanded ${left[0]}: the plugin would send it as is`);
  return out;
}
