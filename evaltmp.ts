import { runCase, summarise } from './eval/evaluate.js';
import { expand, HANG_FAMILIES } from './eval/matrix.js';

const only = process.argv[2] ? Number(process.argv[2]) : undefined;
const cases = expand({ sizes: [], steps: 100, families: HANG_FAMILIES }).filter(
  (c) => only === undefined || c.ranks === only,
);
const rs = [];
for (const c of cases) {
  const t = performance.now();
  const r = runCase(c);
  rs.push(r);
  console.log(
    c.family,
    c.ranks,
    c.seed,
    r.detected,
    r.ttdMs,
    r.falseFindings.map((f) => f.type + ' ' + f.host + ' ' + f.summary.slice(0, 200)),
    r.events,
    ((performance.now() - t) / 1000).toFixed(1) + ' s',
  );
}
console.log(summarise(rs));
