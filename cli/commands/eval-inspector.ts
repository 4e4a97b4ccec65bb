/**
 * `rankwatch eval --path inspector`: every job of a matrix judged twice, on the simulator's own
 * events and through NCCL Inspector dump files and the collector's Inspector intake
 * (eval/inspector.ts), with the two tables and how far they agree.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { RankwatchError } from '../../core/errors.js';
import { type RunResult, runCase, summarise } from '../../eval/evaluate.js';
import { emptyStats, type InspectorPathOptions, throughInspector } from '../../eval/inspector.js';
import { expand, MATRICES } from '../../eval/matrix.js';
import { AGREE_HEAD, agreement, agreementRows, type PathPair } from '../../eval/paths.js';
import { HEAD, markdownTable, replaceBlock, rows } from '../../eval/report.js';
import { defineOptions, type OptionValues } from '../args.js';
import { Progress } from '../progress.js';
import { table } from '../table.js';

export const EVAL_PATH_OPTIONS = defineOptions({
  path: {
    kind: 'enum',
    values: ['native', 'inspector'],
    defaultText: 'native',
    help: "inspector: run every job twice, on the simulator's events and through NCCL Inspector dump files (rankwatch sim --inspector-dir) read by the collector's Inspector intake with the hook's step events, and print both tables and how far they agree (same findings, hosts, GPUs; within a step). Default matrix: inspector (every family, 256 ranks, 3 seeds); --update-docs writes the eval-inspector block",
  },
  'inspector-ops': {
    kind: 'number',
    arg: 'N',
    integer: true,
    min: 1,
    defaultText: '1',
    help: 'operations each simulated collective is reported as (--path inspector)',
  },
  'inspector-dump-us': {
    kind: 'number',
    arg: 'N',
    integer: true,
    min: 1,
    defaultText: '500',
    help: "the plugin's dump interval in µs (--path inspector)",
  },
  'inspector-verbose': { kind: 'boolean', help: 'records carry their kernel times (--path inspector)' },
});

type PathValues = OptionValues<typeof EVAL_PATH_OPTIONS> & {
  matrix?: string;
  sweep?: boolean;
  json?: boolean;
  'update-docs'?: string;
};

const BLOCK = 'eval-inspector';

/** Whether the flags ask for the Inspector path (its own flags without it are refused). */
export function wantsPathEval(values: PathValues): boolean {
  if (values.path === 'inspector') return true;
  const own = (['inspector-ops', 'inspector-dump-us', 'inspector-verbose'] as const).find(
    (k) => values[k] !== undefined && values[k] !== false,
  );
  if (own) throw new RankwatchError('RANKWATCH_ERR_USAGE', `--${own} needs --path inspector`);
  return false;
}

export async function runPathEval(values: PathValues): Promise<number> {
  if (values.sweep) throw new RankwatchError('RANKWATCH_ERR_USAGE', '--sweep judges the native path only');
  const docs = values['update-docs'];
  if (docs) replaceBlock(readFileSync(docs, 'utf8'), BLOCK, ''); // a missing one: ENOENT, exit 2
  const name = values.matrix ?? 'inspector';
  const matrix = MATRICES[name];
  if (!matrix)
    throw new RankwatchError(
      'RANKWATCH_ERR_USAGE',
      `unknown matrix "${name}" (expected ${Object.keys(MATRICES).join(', ')})`,
    );
  const o: InspectorPathOptions = {
    opsPerCollective: values['inspector-ops'] ?? 1,
    dumpIntervalUs: values['inspector-dump-us'] ?? 500,
    verbose: values['inspector-verbose'] === true,
  };
  const cases = expand(matrix);
  const progress = new Progress();
  const started = performance.now();
  const pairs: PathPair[] = cases.map((c, i) => {
    progress.update(
      i / cases.length,
      `eval --path inspector: job ${i + 1}/${cases.length} · ${c.family} · ${c.ranks} ranks · seed ${c.seed}`,
    );
    const stats = emptyStats();
    return {
      native: runCase(c),
      inspector: runCase(c, {}, (sim) => throughInspector(sim, o, stats)),
      stats,
    };
  });
  progress.clear();
  const native = summarise(pairs.map((p) => p.native));
  const inspector = summarise(pairs.map((p) => p.inspector));
  const agreed = agreement(pairs);
  if (values.json) {
    const brief = ({ falseFindings, opened, stepEnds: _ends, ...r }: RunResult) => ({
      ...r,
      falseFindings: falseFindings.map((f) => f.summary),
      opened: opened?.map((f) => f.summary),
    });
    console.log(
      JSON.stringify(
        {
          matrix: name,
          path: 'inspector',
          inspector: o,
          native,
          inspectorPath: inspector,
          agreement: agreed,
          runs: pairs.map((p) => ({
            native: brief(p.native),
            inspector: brief(p.inspector),
            stats: p.stats,
          })),
        },
        null,
        2,
      ),
    );
    return 0;
  }
  console.log("Native path (the simulator's collective events):");
  console.log(table(HEAD, rows(native)));
  console.log("Inspector path (dump files → the collector's Inspector intake → detectors):");
  console.log(table(HEAD, rows(inspector)));
  console.log('Agreement:');
  console.log(table(AGREE_HEAD, agreementRows(agreed)));
  for (const a of agreed) for (const d of a.differences) console.log(`differs: ${d}`);
  const records = pairs.reduce((n, p) => n + p.stats.records, 0);
  const reduced = pairs.reduce((n, p) => n + p.stats.reduced, 0);
  const gpuS = pairs.reduce((n, p) => n + p.stats.gpuSeconds, 0);
  console.log(
    `${cases.length} jobs twice in ${((performance.now() - started) / 1000).toFixed(1)} s; on the wire, ${(records / gpuS).toFixed(2)} Inspector records per GPU per second before the edge reduction (${o.opsPerCollective} per simulated collective), ${(reduced / gpuS).toFixed(2)} events after.`,
  );
  if (docs) {
    const content = [
      "*Native path* (the simulator's collective events):",
      '',
      markdownTable(HEAD, rows(native)),
      '',
      "*Inspector path* (dump files → the collector's Inspector intake → detectors):",
      '',
      markdownTable(HEAD, rows(inspector)),
      '',
      '*Agreement*, per scenario:',
      '',
      markdownTable(AGREE_HEAD, agreementRows(agreed)),
    ].join('\n');
    writeFileSync(docs, replaceBlock(readFileSync(docs, 'utf8'), BLOCK, content));
    process.stderr.write(`updated ${docs}\n`);
  }
  return 0;
}
