import { RankwatchError } from '../../core/errors.js';
import { HEAP_HELP } from '../../core/heap.js';
import { deadLetterFileSink, findingFileSink } from '../../pipeline/sinks.js';
import { type Command, num, parse } from '../args.js';
import { LineWriter } from '../jsonl.js';
import { ExpiredCount } from '../retention.js';
import { stdinToFile } from '../stdin.js';
import { openStore, STORE_FLAGS } from '../store-options.js';

const SHOW_FIRST_ERRORS = 5;

export const replay: Command = {
  name: 'replay',
  usage: `rankwatch replay FILE|- [--findings OUT.jsonl] [options]

Reads v1 events (JSON lines, plain or gzip: detected by its first bytes) from FILE or stdin, runs every detector with event time as the
clock, and writes each finding event (open, update, resolved) as one JSON line. The same input
gives the same findings, every time. Malformed lines are counted, the first few reported with
their line numbers, and the rest of the input is still processed. Input without a single valid
event exits 1.

  --findings FILE      where findings go (default: stdout)
  --dead-letter FILE   write each malformed line with its reason as JSON lines
  --data DIR           also store events and findings in chDB under DIR
  --clickhouse-url URL also store them in a ClickHouse server (see rankwatch up --help for the
                       other store flags: --clickhouse-user, --clickhouse-database, ...)
  --convention C       FLOP convention for MFU (palm, megatron, megatron-causal)
  --gpu-mtbf-h H       fleet MTBF of one GPU, hours (GPU-hours per interruption): lets a job with
                       fewer than 3 interruptions of its own get a checkpoint_interval finding
  --quiet              no topology line and no summary on stderr
${HEAP_HELP}`,
  async run(argv) {
    const { values, positionals } = parse(
      argv,
      {
        findings: { type: 'string' },
        'dead-letter': { type: 'string' },
        ...STORE_FLAGS,
        convention: { type: 'string' },
        'gpu-mtbf-h': { type: 'string' },
        quiet: { type: 'boolean' },
      },
      true,
    );
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    if (positionals.length !== 1)
      throw new RankwatchError('RANKWATCH_ERR_USAGE', 'give one input FILE, or - for stdin');
    // Loaded once past --help and the usage check, which then need none of them.
    const [{ DETECTOR_DEFAULTS }, { parseConvention }, { buildPipeline }, { FileTransport }] =
      await Promise.all([
        import('../../detectors/runner.js'),
        import('../../mfu/flops.js'),
        import('../../pipeline/build.js'),
        import('../../stream/file.js'),
      ]);
    const detectors = {
      convention: values.convention ? parseConvention(values.convention) : DETECTOR_DEFAULTS.convention,
      checkpointInterval: {
        ...DETECTOR_DEFAULTS.checkpointInterval,
        gpuMtbfH:
          values['gpu-mtbf-h'] === undefined
            ? undefined
            : num(values['gpu-mtbf-h'], 'gpu-mtbf-h', undefined, { min: 0, exclusiveMin: true }),
      },
    };
    // Replay stores only when asked to: a folder, a server, or an explicit --store.
    const wantsStore =
      values.data !== undefined || values['clickhouse-url'] !== undefined || values.store !== undefined;
    // A store in chDB must not see a piped stdin (cli/stdin.ts): read it from a copy instead.
    const input = positionals[0] === '-' && wantsStore ? await stdinToFile() : positionals[0];
    const opened = wantsStore ? await openStore(values) : undefined;
    const store = opened?.store;
    const expired = new ExpiredCount(opened?.config.schema?.rawTtlDays);
    const errors: string[] = [];
    const jobsSeen = new Set<string>();
    const source = new FileTransport({ path: input, linesPerDelivery: store ? 50_000 : 8192 });
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
        `no valid event in ${positionals[0] === '-' ? 'stdin' : positionals[0]}` +
          (malformed > 0
            ? ` (${malformed} malformed line${malformed === 1 ? '' : 's'}${errors[0] ? `; ${errors[0].trim()}` : ''})`
            : ' (it is empty)'),
      );
    }
    return 0;
  },
};
