import { RankwatchError } from '../../core/errors.js';
import { DETECTOR_DEFAULTS, DetectorRunner } from '../../detectors/runner.js';
import { parseConvention } from '../../mfu/flops.js';
import type { Finding } from '../../schema/finding.js';
import { parseEventLine } from '../../schema/validate.js';
import { deadLetterRows, eventRows, type InsertBatch, outputRows } from '../../store/rows.js';
import { type Command, num, parse } from '../args.js';
import { LineWriter, readLineChunks } from '../jsonl.js';
import { ExpiredCount } from '../retention.js';
import { stdinToFile } from '../stdin.js';
import { openStore, STORE_FLAGS } from '../store-options.js';
import { storedReports } from './report.js';

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
  --quiet              no summary on stderr`,
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
    const runner = new DetectorRunner({
      convention: values.convention ? parseConvention(values.convention) : DETECTOR_DEFAULTS.convention,
      checkpointInterval: {
        ...DETECTOR_DEFAULTS.checkpointInterval,
        gpuMtbfH:
          values['gpu-mtbf-h'] === undefined
            ? undefined
            : num(values['gpu-mtbf-h'], 'gpu-mtbf-h', undefined, { min: 0, exclusiveMin: true }),
      },
    });
    const out = new LineWriter(values.findings);
    const dead = values['dead-letter'] ? new LineWriter(values['dead-letter']) : undefined;
    // Replay stores only when asked to: a folder, a server, or an explicit --store.
    const wantsStore =
      values.data !== undefined || values['clickhouse-url'] !== undefined || values.store !== undefined;
    // A store in chDB must not see a piped stdin (cli/stdin.ts): read it from a copy instead.
    const input = positionals[0] === '-' && wantsStore ? await stdinToFile() : positionals[0];
    const opened = wantsStore ? await openStore(values) : undefined;
    const store = opened?.store;
    const expired = new ExpiredCount(opened?.config.schema?.rawTtlDays);
    await store?.migrate();
    const errors: string[] = [];
    const jobsSeen = new Set<string>();
    let malformed = 0;
    let events = 0;
    let findings = 0;
    const started = performance.now();
    const pending: Parameters<typeof eventRows>[0] = [];
    const pendingLines: string[] = [];
    const deadRows: Parameters<typeof deadLetterRows>[0] = [];

    const emit = async (fs: Finding[]) => {
      findings += fs.length;
      for (const f of fs) await out.write(JSON.stringify(f));
    };
    const flushStore = async () => {
      if (!store) return;
      const o = runner.take();
      await emit(o.findings);
      const batches: InsertBatch[] = [
        ...eventRows(pending, pendingLines),
        ...deadLetterRows(deadRows),
        ...outputRows(o),
      ];
      pending.length = 0;
      pendingLines.length = 0;
      deadRows.length = 0;
      await store.insert(batches);
    };

    try {
      for await (const { first, lines } of readLineChunks(input)) {
        for (let i = 0; i < lines.length; i++) {
          const line = lines[i];
          if (line.length === 0 || (line.charCodeAt(0) !== 123 && line.trim().length === 0)) continue; // 123: '{'
          const n = first + i;
          const v = parseEventLine(line);
          if (!v.ok) {
            malformed++;
            if (errors.length < SHOW_FIRST_ERRORS) errors.push(`  line ${n}: ${v.reason}`);
            await dead?.write(JSON.stringify({ line: n, reason: v.reason, raw: line }));
            if (store) deadRows.push({ ts: Date.now(), source: positionals[0], reason: v.reason, raw: line });
            continue;
          }
          events++;
          if (store && 'job' in v.event && v.event.job) jobsSeen.add(v.event.job); // for the stored reports
          runner.push(v.event);
          if (store) {
            expired.see(v.event.ts);
            pending.push(v.event);
            pendingLines.push(line.trim());
            if (pending.length >= 50_000) await flushStore();
          }
        }
        if (!store) await emit(runner.take().findings);
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        throw new RankwatchError('RANKWATCH_ERR_INPUT', `no such file: ${positionals[0]}`);
      }
      throw err;
    }
    // A recorded file is over: jobs that never said `finished` end as the live run would end them.
    runner.endOfInput();
    if (store) await flushStore();
    else await emit(runner.take().findings);
    await out.close();
    await dead?.close();
    // With a store, end with each job's report (on stderr when the findings take stdout).
    if (store && !values.quiet)
      (values.findings ? process.stdout : process.stderr).write(
        `\n${await storedReports(store, jobsSeen)}\n`,
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
