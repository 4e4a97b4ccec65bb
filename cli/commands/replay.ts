import { RankwatchError } from '../../core/errors.js';
import { FLOP_CONVENTIONS } from '../../mfu/flops.js';
import { deadLetterFileSink, findingFileSink } from '../../pipeline/sinks.js';
import { type Command, defineOptions, optionsHelp, parseOptions } from '../args.js';
import { LineWriter } from '../jsonl.js';
import { HEAP_OPTIONS } from '../process-options.js';
import { ExpiredCount } from '../retention.js';
import { stdinToFile } from '../stdin.js';
import { openStore, STORE_OPTIONS } from '../store-options.js';

const REPLAY_OPTIONS = defineOptions({
  findings: { kind: 'file', defaultText: 'stdout', help: 'where findings go' },
  'dead-letter': { kind: 'file', help: 'write each malformed line with its reason as JSON lines' },
  convention: {
    kind: 'enum',
    values: FLOP_CONVENTIONS,
    arg: 'C',
    help: 'FLOP convention for MFU (palm, megatron, megatron-causal)',
  },
  'gpu-mtbf-h': {
    kind: 'number',
    arg: 'H',
    exclusiveMin: true,
    help: 'fleet MTBF of one GPU, hours (GPU-hours per interruption): lets a job with fewer than 3 interruptions of its own get a checkpoint_interval finding',
  },
  quiet: { kind: 'boolean', help: 'no topology line and no summary on stderr' },
});

const OPTIONS = defineOptions({ ...REPLAY_OPTIONS, ...STORE_OPTIONS });

const SHOW_FIRST_ERRORS = 5;

export const replay: Command = {
  name: 'replay',
  usage: `rankwatch replay FILE...|- [--findings OUT.jsonl] [options]

Reads v1 events (JSON lines, plain or gzip: detected by its first bytes) from FILE or stdin, runs every detector with event time as the
clock, and writes each finding event (open, update, resolved) as one JSON line. The same input
gives the same findings, every time. Malformed lines are counted, the first few reported with
their line numbers, and the rest of the input is still processed. Input without a single valid
event exits 1. Several FILEs are read together, merged by event time (each in its own time
order): the hooks' step events in one file and a collector's collectives in another give the
findings they give interleaved.

${optionsHelp(REPLAY_OPTIONS)}
${optionsHelp(HEAP_OPTIONS)}
Store (only when --data, --clickhouse-url or --store is on the command line; their variables
alone do not make replay store, but fill in the rest once it does):
${optionsHelp(STORE_OPTIONS)}`,
  options: OPTIONS,
  async run(argv) {
    const { values, positionals, from } = parseOptions(argv, OPTIONS, { positionals: true });
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    if (positionals.length === 0 || (positionals.length > 1 && positionals.includes('-')))
      throw new RankwatchError('RANKWATCH_ERR_USAGE', 'give input FILEs, or - (alone) for stdin');
    // Loaded once past --help and the usage check, which then need none of them.
    const [{ DETECTOR_DEFAULTS }, { buildPipeline }, { FileTransport }] = await Promise.all([
      import('../../detectors/runner.js'),
      import('../../pipeline/build.js'),
      import('../../stream/file.js'),
    ]);
    const detectors = {
      convention: values.convention ?? DETECTOR_DEFAULTS.convention,
      checkpointInterval: { ...DETECTOR_DEFAULTS.checkpointInterval, gpuMtbfH: values['gpu-mtbf-h'] },
    };
    // Replay stores only when its command line asks: a folder, a server, or an explicit --store
    // (CLICKHOUSE_URL or RANKWATCH_DATA set for a service does not make an offline replay write).
    const wantsStore = from.data === 'flag' || from['clickhouse-url'] === 'flag' || from.store === 'flag';
    // A store in chDB must not see a piped stdin (cli/stdin.ts): read it from a copy instead.
    const input = positionals[0] === '-' && wantsStore ? await stdinToFile() : positionals[0];
    const opened = wantsStore ? await openStore(values) : undefined;
    const store = opened?.store;
    const expired = new ExpiredCount(opened?.config.schema?.rawTtlDays);
    const errors: string[] = [];
    const jobsSeen = new Set<string>();
    // Without a store, 2,048 lines a delivery: its parsed events die young, in the scavenger, where
    // 8,192 kept ~8 MB of them alive long enough to be promoted (when measured, 8,192 cost replay
    // about 30% more CPU on the field mix; today's ratios: docs/benchmarks.md, replay). A
    // store wants fewer, larger writes.
    const source = new FileTransport({
      path: input,
      more: positionals.slice(1),
      linesPerDelivery: store ? 50_000 : 2048,
    });
    const pipeline = buildPipeline({
      transport: source,
      store,
      storeName: opened?.where,
      detectors,
      findingSinks: [
        findingFileSink(
          values.findings ? `file ${values.findings}` : 'stdout',
          new LineWriter(values.findings),
        ),
      ],
      deadLetterSinks: [
        {
          name: 'stderr summary',
          write: (letters) => {
            for (const d of [...letters].sort((a, b) => (a.line ?? 0) - (b.line ?? 0)))
              if (errors.length < SHOW_FIRST_ERRORS) errors.push(`  line ${d.line}: ${d.reason}`);
          },
        },
        ...(values['dead-letter']
          ? [deadLetterFileSink(`file ${values['dead-letter']}`, new LineWriter(values['dead-letter']))]
          : []),
      ],
      // Only a store needs them: the jobs for its reports, the events its retention will drop.
      onEvents: store
        ? (events) => {
            for (const e of events) {
              if ('job' in e && e.job) jobsSeen.add(e.job);
              expired.see(e.ts);
            }
          }
        : undefined,
    });
    const started = performance.now();
    try {
      await pipeline.start(); // checks the input first: a bad path is one line, before any other
      if (!values.quiet) process.stderr.write(`${pipeline.describe()}\n`);
      await pipeline.stop();
    } catch (err) {
      await store?.close();
      throw err;
    }
    const { events, dead_letters: malformed, findings } = pipeline.counters();
    // With a store, end with each job's report (on stderr when the findings take stdout).
    if (store && !values.quiet)
      (values.findings ? process.stdout : process.stderr).write(
        // Loaded only here: the report's table code is not needed to replay.
        `\n${await (await import('./report.js')).storedReports(store, jobsSeen)}\n`,
      );
    await store?.close();
    if (!values.quiet) {
      const secs = (performance.now() - started) / 1000;
      const rate = Math.round(events / Math.max(secs, 1e-9));
      process.stderr.write(
        `replayed ${events} events in ${secs.toFixed(2)} s (${rate.toLocaleString('en-US')} events/s), ` +
          `${findings} finding events, peak RSS ${Math.round(process.resourceUsage().maxRSS / 1024)} MB\n`,
      );
      if (malformed > 0) {
        process.stderr.write(
          `${malformed} malformed line${malformed === 1 ? '' : 's'} set aside; first ${errors.length}:\n${errors.join('\n')}\n`,
        );
      }
    }
    const dropped = store ? expired.message(events) : undefined;
    if (dropped) process.stderr.write(`rankwatch replay: ${dropped}\n`);
    if (events === 0) {
      throw new RankwatchError(
        'RANKWATCH_ERR_INPUT',
        `no valid event in ${positionals[0] === '-' ? 'stdin' : positionals.join(', ')}` +
          (malformed > 0
            ? ` (${malformed} malformed line${malformed === 1 ? '' : 's'}${errors[0] ? `; ${errors[0].trim()}` : ''})`
            : ' (it is empty)'),
      );
    }
    return 0;
  },
};
