/**
 * Prometheus text exposition format (what dcgm-exporter serves), reduced to what collectors need:
 * metric name, labels and value per sample. Comments and blank lines are skipped; a sample with
 * no value (dcgm-exporter prints blanks for fields a GPU does not report) keeps `value: undefined`.
 * CRLF line ends, tabs and spaces between labels (`{gpu="0", UUID=…}` as the exporter's README
 * shows) are accepted. A body cut short is the caller's to refuse (see dcgm.ts).
 */
import { type ParseProblem, problem, splitLines } from './problems.js';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number | undefined;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;

export function parsePrometheusText(text: string): { samples: Sample[]; problems: ParseProblem[] } {
  const samples: Sample[] = [];
  const problems: ParseProblem[] = [];
  const lines = splitLines(text);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line === '' || line.startsWith('#')) continue;
    const r = parseSampleLine(line);
    if (typeof r === 'string') problems.push(problem(i + 1, r, line));
    else samples.push(r);
  }
  return { samples, problems };
}

function parseSampleLine(line: string): Sample | string {
  const m = NAME.exec(line);
  if (!m) return 'no metric name';
  const name = m[0];
  let pos = name.length;
  const labels: Record<string, string> = {};
  if (line[pos] === '{') {
    pos++;
    for (;;) {
      while (line[pos] === ' ' || line[pos] === '\t' || line[pos] === ',') pos++;
      if (line[pos] === '}') {
        pos++;
        break;
      }
      if (pos >= line.length) return 'unterminated label set';
      const ln = LABEL_NAME.exec(line.slice(pos));
      if (!ln) return `bad label name at column ${pos + 1}`;
      pos += ln[0].length;
      if (line[pos] !== '=' || line[pos + 1] !== '"') return `label ${ln[0]} has no quoted value`;
      pos += 2;
      let value = '';
      for (;;) {
        if (pos >= line.length) return `unterminated value of label ${ln[0]}`;
        const c = line[pos++];
        if (c === '"') break;
        if (c === '\\') {
          const n = line[pos++];
          value += n === 'n' ? '\n' : (n ?? '');
        } else value += c;
      }
      labels[ln[0]] = value;
    }
  }
  const rest = line.slice(pos).trim();
  if (rest === '') return { name, labels, value: undefined };
  const valueText = rest.split(/\s+/)[0];
  const value = parseValue(valueText);
  if (value === null) return `value "${valueText}" is not a number`;
  return { name, labels, value };
}

function parseValue(s: string): number | undefined | null {
  if (s === 'NaN') return undefined;
  if (s === '+Inf' || s === 'Inf') return Number.POSITIVE_INFINITY;
  if (s === '-Inf') return Number.NEGATIVE_INFINITY;
  const n = Number(s);
  return Number.isNaN(n) ? null : n;
}
