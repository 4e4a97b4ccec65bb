import { ALERT_FLAGS, ALERT_FLAGS_HELP, alertingFrom } from '../../alerts/cli-options.js';
import { RankwatchError } from '../../core/errors.js';
import { Pipeline } from '../../pipeline/pipeline.js';
import type { Finding } from '../../schema/finding.js';
import { type DeadLetter, deadLetterRows } from '../../store/rows.js';
import { KafkaTransport } from '../../stream/kafka.js';
import { KAFKA_FLAGS, KAFKA_FLAGS_HELP, kafkaConfigFrom } from '../../stream/kafka-config.js';
import { type Command, num, parse } from '../args.js';
import { LineWriter } from '../jsonl.js';
import { openStore, STORE_FLAGS, STORE_FLAGS_HELP } from '../store-options.js';

export const detect: Command = {
  name: 'detect',
  usage: `rankwatch detect [options]

Joins a Kafka consumer group on the events topic and runs every detector on the jobs of the
partitions it owns; start more instances with the same --group to share the jobs. Each batch is
validated, run through the detectors and written to the store before its offset is committed
(at least once; the store's inserts are idempotent, so a batch seen twice leaves one copy).
Malformed events go to the dead-letter topic with their reason. When partitions move here, the
batches their previous owner committed are replayed into the detectors with output suppressed,
so open findings carry on instead of opening twice. SIGTERM or SIGINT: finish the batch in
hand, commit, leave the group, exit 0 (a batch whose store write has failed for 10 s is left
uncommitted for the next owner instead of holding shutdown).

  --findings FILE           also write each finding event as a JSON line
  --no-events               do not keep raw events (the largest table); steps, detector output
                            and dead letters are still stored
  --no-replay               on a new partition, start at the committed offset without rebuilding state
  --replay-max-age MIN      rebuild state from the last MIN minutes only (default: all retained);
                            an incident open since before then is opened again under a new id
  --stats-interval S        print counters on stderr every S seconds, 0 = never (default 10)
  --quiet                   no log lines on stderr
${ALERT_FLAGS_HELP}
${KAFKA_FLAGS_HELP}
${STORE_FLAGS_HELP}`,
  async run(argv) {
    const { values } = parse(argv, {
      ...KAFKA_FLAGS,
      ...STORE_FLAGS,
      ...ALERT_FLAGS,
      findings: { type: 'string' },
      'no-replay': { type: 'boolean' },
      'replay-max-age': { type: 'string' },
      'no-events': { type: 'boolean' },
      'stats-interval': { type: 'string' },
      quiet: { type: 'boolean' },
    });
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const quiet = values.quiet === true;
    const log = (level: string, message: string) => {
      if (!quiet || level === 'error') process.stderr.write(`detect ${level}: ${message}\n`);
    };
    const config = kafkaConfigFrom(values, process.env);
    const statsEvery = num(values['stats-interval'], 'stats-interval', 10);
    const replayMaxAge = values['replay-max-age'];
    const replayMaxAgeMs =
      replayMaxAge === undefined ? undefined : num(replayMaxAge, 'replay-max-age', 0) * 60_000;
    if (replayMaxAgeMs !== undefined && !(replayMaxAgeMs > 0))
      throw new RankwatchError('RANKWATCH_ERR_USAGE', '--replay-max-age needs a number of minutes above 0');
    const { store, where } = await openStore(values);
    const alerting = alertingFrom(
      values,
      process.env,
      (d) => void store.insert(deadLetterRows([d])).catch(() => {}),
    );
    const out = values.findings ? new LineWriter(values.findings) : undefined;
    let pipeline: Pipeline | undefined;
    const transport = new KafkaTransport(config, {
      log,
      onReplay: values['no-replay'] ? undefined : (d) => pipeline?.replay(d),
      replayMaxAgeMs,
    });
    let deadLetters: DeadLetter[] = [];
    let findings: Finding[] = [];
    let paused = false;
    pipeline = new Pipeline({
      transport,
      store,
      storeEvents: values['no-events'] !== true,
      onFindings: (fs) => {
        findings.push(...fs);
        alerting?.onFindings(fs);
      },
      onDeadLetters: (rows) => deadLetters.push(...rows),
      onStoreRetry: (err, attempt) => {
        // The store is behind or away: stop fetching until it takes this batch.
        if (!paused) transport.pause();
        paused = true;
        log('warn', `store write failed (attempt ${attempt}), retrying: ${(err as Error).message}`);
      },
    });
    const p = pipeline;

    await store.migrate();
    await transport.consume(async (d) => {
      await p.handle(d);
      if (paused) {
        transport.resume();
        paused = false;
      }
      // Dead letters and findings go out before the offset is committed: at least once as well.
      const dl = deadLetters;
      deadLetters = [];
      if (dl.length) await transport.deadLetter(dl, { partition: d.partition, offset: d.offset });
      const fs = findings;
      findings = [];
      if (out && fs.length) {
        for (const f of fs) await out.write(JSON.stringify(f));
        await out.flush();
      }
    });
    log(
      'info',
      `joined group ${transport.config.group} on ${transport.config.topic} at ${transport.config.brokers.join(',')}; storing in ${where}`,
    );

    const stats = () => {
      const t = transport.counters();
      const c = p.counters();
      log(
        'info',
        JSON.stringify({
          batches: c.batches,
          events: c.events,
          findings: c.findings,
          dead_letters: c.dead_letters,
          replayed_batches: t.replayed_batches,
          replay_skipped_batches: t.replay_skipped_batches,
          commits: t.commits,
          store_retries: c.store_retries,
        }),
      );
    };
    const timer = statsEvery > 0 ? setInterval(stats, statsEvery * 1000) : undefined;

    await new Promise<void>((done) => {
      const stop = (signal: string) => {
        log('info', `${signal}: finishing the batch in hand, committing, leaving the group`);
        done();
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
    });
    if (timer) clearInterval(timer);
    // The batch in hand finishes and commits; with the store down it is given up after the grace
    // period (uncommitted, so the next owner gets it) instead of holding shutdown.
    await p.close();
    await out?.close();
    await alerting?.stop();
    await store.close();
    stats();
    return 0;
  },
};
