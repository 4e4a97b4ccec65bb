import { readFileSync, writeFileSync } from 'node:fs';
import { runCase, summarise } from '../../eval/evaluate.js';
import { expand, MATRICES } from '../../eval/matrix.js';
import { FALSE_HEAD, falseRateRows, HEAD, markdownTable, replaceBlock, rows } from '../../eval/report.js';
import { SWEEP_H, sweep } from '../../eval/sweep.js';
import { type Command, defineOptions, optionsHelp, parseOptions } from '../args.js';
import { Progress } from '../progress.js';
import { table } from '../table.js';
import { EVAL_PATH_OPTIONS, runPathEval, wantsPathEval } from './eval-inspector.js';

const OPTIONS = defineOptions({
  matrix: {
    kind: 'enum',
    values: Object.keys(MATRICES),
    arg: 'NAME',
    defaultText: 'default; inspector with --path inspector',
    help: `default (${expand(MATRICES.default).length} jobs), quick (${expand(MATRICES.quick).length} jobs), scale (a 6% slow rank at 256, 8k, 16k ranks), clean (every clean job, long ones included: false findings per detector), long`,
  },
  sweep: { kind: 'boolean', help: "instead: the straggler's trade-off curve over its CUSUM threshold h" },
  json: { kind: 'boolean', help: 'print the results as JSON' },
  'update-docs': {
    kind: 'file',
    help: 'write the table into FILE between <!-- eval:start/end --> markers (clean: eval-false, scale: eval-scale, --sweep: sweep)',
  },
  ...EVAL_PATH_OPTIONS,
});

export const evaluate: Command = {
  name: 'eval',
  usage: `rankwatch eval [--matrix ${Object.keys(MATRICES).join('|')}] [--sweep] [--json] [--update-docs FILE]

Runs simulated jobs through the detectors: clean jobs (heterogeneous stages, stalls, spikes;
fleets whose GPUs each have their own speed offset) and one injected fault of each kind
(throttle, 5% slow rank, intermittent 30% slow rank, degraded NIC, node power brake, bad pair
link, a fast GPU turning 4% slower, a rank that hangs at a step boundary or before its
data-parallel all-reduce, a rank stalling 3-6 s every ~50 steps), over several seeds and 256 to 4096 ranks. Prints, per
scenario: recall (the finding names the right host and GPU), median and worst time to detect in
event time, cost-estimate error against the simulator's true cost, and false findings
(straggler, throttle, slow_link, mfu_drop, hang types, recurring_stall that match no injected fault) per 1,000
rank-hours.

${optionsHelp(OPTIONS)}`,
  options: OPTIONS,
  async run(argv) {
    const { values } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    if (wantsPathEval(values)) return runPathEval(values);
    // A docs file without its markers is reported before minutes of evaluation, not after.
    if (values['update-docs']) {
      // A missing file is Node's ENOENT with its path: the CLI names --update-docs (exit 2).
      const doc = readFileSync(values['update-docs'], 'utf8');
      replaceBlock(doc, values.sweep ? 'sweep' : blockOf(values.matrix ?? 'default'), '');
    }
    const progress = new Progress();
    if (values.sweep) {
      let done = 0;
      const total = SWEEP_H.length * 20;
      const result = sweep(SWEEP_H, [1, 2, 3, 4], () => {
        done++;
        progress.update(done / total, `sweep: ${done}/${total} jobs`);
      });
      progress.clear();
      if (values.json) {
        console.log(JSON.stringify(result, null, 2));
        return 0;
      }
      const head = [
        'h',
        'false / 1000 rank-h (10x spikes)',
        'slow 5%: recall',
        'TTD median (s)',
        'intermittent: recall',
        'TTD median (s)',
      ];
      const body = result.map((r) => [
        String(r.h),
        r.falsePer1000RankHours.toFixed(2),
        `${Math.round(r.slowRecall * 100)}%`,
        r.slowTtdMedianS?.toFixed(1) ?? '–',
        `${Math.round(r.intermittentRecall * 100)}%`,
        r.intermittentTtdMedianS?.toFixed(1) ?? '–',
      ]);
      console.log(table(head, body));
      if (values['update-docs']) update(values['update-docs'], 'sweep', markdownTable(head, body));
      return 0;
    }
    const name = values.matrix ?? 'default';
    const matrix = MATRICES[name];
    const cases = expand(matrix);
    const started = performance.now();
    const results = cases.map((c, i) => {
      progress.update(
        i / cases.length,
        `eval: job ${i + 1}/${cases.length} · ${c.family} · ${c.ranks} ranks · seed ${c.seed}`,
      );
      return runCase(c);
    });
    progress.clear();
    const summary = summarise(results);
    if (values.json) {
      console.log(
        JSON.stringify(
          {
            matrix: name,
            summary,
            runs: results.map(({ falseFindings, opened: _opened, stepEnds: _ends, ...r }) => ({
              ...r,
              falseFindings: falseFindings.map((f) => f.summary),
            })),
          },
          null,
          2,
        ),
      );
      return 0;
    }
    console.log(table(HEAD, rows(summary)));
    console.log(table(FALSE_HEAD, falseRateRows(results)));
    const events = results.reduce((n, r) => n + r.events, 0);
    console.log(
      `${cases.length} jobs, ${events.toLocaleString('en-US')} events in ${((performance.now() - started) / 1000).toFixed(1)} s.`,
    );
    for (const r of results) {
      for (const f of r.falseFindings)
        console.log(`false finding (${r.family}, ${r.ranks} ranks, seed ${r.seed}): ${f.summary}`);
      if (r.faulty && !r.detected) console.log(`missed: ${r.family}, ${r.ranks} ranks, seed ${r.seed}`);
      if (r.resolvedWhileActive)
        console.log(
          `resolved ${r.resolvedWhileActive}x while the fault persisted: ${r.family}, ${r.ranks} ranks, seed ${r.seed}`,
        );
    }
    if (values['update-docs']) {
      const block = blockOf(name);
      const content =
        name === 'clean'
          ? markdownTable(FALSE_HEAD, falseRateRows(results))
          : markdownTable(HEAD, rows(summary));
      update(values['update-docs'], block, content);
    }
    return 0;
  },
};

/** The docs block each matrix writes: the clean one writes its false-finding rates per detector. */
function blockOf(matrix: string): string {
  return matrix === 'default' ? 'eval' : matrix === 'clean' ? 'eval-false' : `eval-${matrix}`;
}

function update(file: string, block: string, content: string): void {
  writeFileSync(file, replaceBlock(readFileSync(file, 'utf8'), block, content));
  process.stderr.write(`updated ${file}\n`);
}
