/**
 * The table of every environment variable rankwatch reads (docs/operations.md, between the
 * `options` markers), made from the commands' option declarations so it cannot go stale:
 * cli/options.test.ts fails when the page differs, and `node --import tsx scripts/options-doc.ts`
 * writes it.
 */
import { defaultWords, type OptionSpec, type Options } from './args.js';

/** What a value of this kind looks like, for a person. */
function valueWords(spec: OptionSpec): string {
  switch (spec.kind) {
    case 'boolean':
      return '`1` or `0`';
    case 'number': {
      const min = spec.min ?? 0;
      const whole = spec.integer ? 'whole number' : 'number';
      const from = spec.exclusiveMin ? `> ${min}` : `≥ ${min}`;
      return `${whole} ${from}${spec.max !== undefined ? `, ≤ ${spec.max}` : ''}`;
    }
    case 'url':
      return 'http(s) URL';
    case 'list':
      return spec.item === 'url'
        ? 'http(s) URLs, comma-separated'
        : spec.item === 'host:port'
          ? 'host:port, comma-separated'
          : 'comma-separated list';
    case 'enum':
      return spec.values.map((v) => `\`${v}\``).join(', ');
    case 'file':
      return 'path';
    case 'string':
      return 'text';
  }
}

const cell = (s: string) => s.replaceAll('|', '\\|');

/**
 * One row per variable: its flag, the values it takes and its default, and what it sets in each
 * command that reads it (commands that say the same are listed together).
 */
export function variablesTable(
  commands: { name: string; options: Options }[],
  everyCommand: Options,
): string {
  const rows = new Map<string, { flag: string; spec: OptionSpec; uses: Map<string, string[]> }>();
  const add = (flag: string, spec: OptionSpec, command: string) => {
    if (!spec.env) return;
    const row = rows.get(spec.env) ?? { flag, spec, uses: new Map<string, string[]>() };
    rows.set(spec.env, row);
    const said = row.uses.get(spec.help) ?? [];
    if (!said.includes(command)) said.push(command);
    row.uses.set(spec.help, said);
  };
  for (const [flag, spec] of Object.entries(everyCommand)) add(flag, spec, 'every command');
  for (const c of commands) for (const [flag, spec] of Object.entries(c.options)) add(flag, spec, c.name);
  const lines = [
    '| variable | flag | value | default | commands: what it sets |',
    '| --- | --- | --- | --- | --- |',
  ];
  for (const [env, { flag, spec, uses }] of [...rows].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const d = defaultWords(spec);
    // A value the parser applies is code; a default said in words (computed elsewhere) is not.
    const shown = d === undefined ? '' : spec.defaultText === undefined ? `\`${d}\`` : d;
    const what = [...uses].map(([help, names]) => `${names.join(', ')}: ${help}`).join('; ');
    lines.push(
      `| \`${env}\` | ${spec.envOnly ? '–' : `\`--${flag}\``} | ${valueWords(spec)} | ${cell(shown)} | ${cell(what)} |`,
    );
  }
  return lines.join('\n');
}

/** docs/operations.md (its text) with the table of variables as the declarations say it now. */
export async function withVariablesTable(doc: string): Promise<string> {
  const [{ COMMANDS }, { PROCESS_OPTIONS }, { replaceBlock }] = await Promise.all([
    import('./command-list.js'),
    import('./process-options.js'),
    import('../eval/report.js'),
  ]);
  const commands = await Promise.all(COMMANDS.map((c) => c.load()));
  return replaceBlock(doc, 'options', variablesTable(commands, PROCESS_OPTIONS));
}
