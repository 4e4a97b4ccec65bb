import { randomUUID } from 'node:crypto';
import { CORDON_OPTIONS, repairLoopFrom } from '../../actions/cli-options.js';
import type { RepairLoop } from '../../actions/leader.js';
import { ALERT_OPTIONS, alertingFrom } from '../../alerts/cli-options.js';
import { RankwatchError, retry } from '../../core/errors.js';
import { Health } from '../../core/health.js';
import { createLogger } from '../../core/log.js';
import type { Pipeline } from '../../pipeline/pipeline.js';
import { alertSink, busDeadLetterSink, findingFileSink } from '../../pipeline/sinks.js';
import type { Finding } from '../../schema/finding.js';
import { DeliveryRanges } from '../../store/delivery-ranges.js';
import { deadLetterRows } from '../../store/rows.js';
import type { KafkaTransport, KafkaTransportDeps } from '../../stream/kafka.js';
import { KAFKA_DEFAULTS, KAFKA_OPTIONS, kafkaConfig } from '../../stream/kafka-config.js';
import { batchByKey } from '../../stream/transport.js';
import { type Command, defineOptions, optionName, optionsHelp, parseOptions } from '../args.js';
import { LineWriter } from '../jsonl.js';
import { HEAP_OPTIONS } from '../process-options.js';
import { openStore, STORE_OPTIONS } from '../store-options.js';

const DETECT_OPTIONS = defineOptions({
  findings: { kind: 'file', help: 'also write each finding event as a JSON line' },
  'no-events': {
    kind: 'boolean',
    help: 'keep raw events only of the kinds a job sends a few of (job, lifecycle, checkpoints, faults, checks), not GPU samples or collectives (the bulk); steps, detector output and dead letters are still stored, GPU-minute panels stay empty',
  },
  'no-replay': {
    kind: 'boolean',
    help: 'on a new partition, start at the committed offset without rebuilding state',
  },
  'replay-max-age': {
    kind: 'number',
    arg: 'MIN',
    exclusiveMin: true,
    unit: 'minutes',
    defaultText: 'all retained',
    help: 'rebuild state from the last MIN minutes only; an incident open since before then is opened again under a new id',
  },
  'stats-interval': {
    kind: 'number',
    arg: 'S',
    default: 10,
    help: 'log counters every S seconds, 0 = never',
  },
  'health-port': {
    kind: 'number',
    integer: true,
    max: 65_535,
    help: 'serve GET /healthz (503 with the reason while the store or the bus fails) and GET /metrics (Prometheus) on --health-host:N (0: any port)',
  },
  'health-host': { kind: 'string', arg: 'ADDR', default: '127.0.0.1', help: 'address of that port' },
  quiet: { kind: 'boolean', help: 'log errors only' },
  stage: {
    kind: 'enum',
    values: ['all', 'shard', 'job'],
    default: 'all',
    help: "the sharded layout for jobs past one process (docs/operations.md, Capacity): 'shard' reads --shard-topic (GPU samples and collectives keyed JOB/hostgroup-N, group --group.shards), runs the GPU detectors and sends collectives reduced per communicator and step, and its GPU findings, to --shard-records-topic; 'job' reads --topic and those records (group --group.records) and runs the rest (every detector for jobs not sharded). 'all': every detector, one process, no shard records",
  },
  'idle-advance-s': {
    kind: 'number',
    arg: 'S',
    default: 30,
    help: 'with no batch for S seconds, event time moves on by the wall time passed (quiet jobs go stale and end; a shard sends the steps it holds open), 0 = never',
  },
  'shard-hold-s': {
    kind: 'number',
    arg: 'S',
    default: 120,
    help: "--stage job: longest a sharded job's steps wait for a host group's records before going on without them",
  },
  'repair-loop': {
    kind: 'boolean',
    help: "take part in the repair loop (node health, cordons; docs/actions.md): of every process sharing the store, the one holding its lease decides and acts, reading every process's findings and checks from the store; the others stand by. Dry-run unless the cordon flags below say otherwise",
  },
});

const OPTIONS = defineOptions({
  ...DETECT_OPTIONS,
  ...KAFKA_OPTIONS,
  ...STORE_OPTIONS,
  ...ALERT_OPTIONS,
  ...CORDON_OPTIONS,
});

export const detect: Command = {
  name: 'detect',
  usage: `rankwatch detect [options]

Joins a Kafka consumer group on the events topic and runs every detector on the jobs of the
partitions it owns; start more instances with the same --group to share the jobs. Each batch is
validated, run through the detectors and written to the store before its offset is committed
(at least once; the store's inserts are idempotent, so a batch seen twice leaves one copy).
Malformed events go to the dead-letter topic with their reason. When partitions move here, the
batches their previous owner committed are replayed into the detectors with output suppressed,
so open findings carry on instead of opening twice. A broker or store that is down at start is
waited for with backoff (health failing meanwhile). SIGTERM or SIGINT: finish the batch in
hand, commit, leave the group, exit 0 (a batch whose store write has failed for 10 s is left
uncommitted for the next owner instead of holding shutdown).

${optionsHelp(DETECT_OPTIONS)}
Exits 1, naming the reason, when it stopped without finishing its work (a batch left
uncommitted because the store kept failing).
${optionsHelp(HEAP_OPTIONS)}
${optionsHelp(ALERT_OPTIONS)}
${optionsHelp(CORDON_OPTIONS)}
${optionsHelp(KAFKA_OPTIONS)}
${optionsHelp(STORE_OPTIONS)}`,
  options: OPTIONS,
  async run(argv) {
    const { values, from } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    // Loaded once past --help, which then needs none of them.
    const [
      { buildPipeline },
      { KafkaTransport },
      { MergedTransport },
      { JobStageRunner },
      { findingRecord, SHARD_FORMAT },
    ] = await Promise.all([
      import('../../pipeline/build.js'),
      import('../../stream/kafka.js'),
      import('../../stream/merged.js'),
      import('../../detectors/job-stage.js'),
      import('../../detectors/slowlink/shard-reduce.js'),
    ]);
    const logger = createLogger('rankwatch detect', values.quiet === true ? { level: 'error' } : {});
    const log = (level: 'info' | 'warn' | 'error', message: string) => logger[level](message);
    const health = new Health(logger);
    health.ok('store');
    // The bus: failing from a kafkajs line that says the broker cannot be reached, or a consumer
    // crash, until the group is joined or a batch handled again, or 90 s pass without such a line
    // (kafkajs lines are rate-limited over 60 s windows, so a longer quiet spell means it is back).
    // Protocol errors kafkajs retries itself do not count. Logged once when it starts and ends.
    let busFailedAt = 0;
    const busFail = (reason: string) => {
      busFailedAt = Date.now();
      health.fail('bus', reason);
    };
    const busOk = () => {
      busFailedAt = 0;
      health.ok('bus');
    };
    health.ok('bus');
    const busQuiet = setInterval(() => {
      if (busFailedAt && Date.now() - busFailedAt > 90_000) busOk();
    }, 5_000);
    busQuiet.unref();
    const kafkaLog = (level: 'info' | 'warn' | 'error', message: string) => {
      if (level === 'error' && UNREACHABLE.test(message)) busFail(message);
      log(level, message);
    };
    // SIGTERM or SIGINT: stop waiting for the broker, or finish the batch in hand (below).
    const stopping = new AbortController();
    const stopped = new Promise<string>((done) => {
      const stop = (signal: string) => {
        stopping.abort();
        done(signal);
      };
      process.once('SIGTERM', () => stop('SIGTERM'));
      process.once('SIGINT', () => stop('SIGINT'));
    });
    const stage = values.stage === 'all' ? undefined : values.stage;
    const base = kafkaConfig(values);
    const recordsTopic = base.shardRecordsTopic ?? KAFKA_DEFAULTS.shardRecordsTopic;
    // A shard reads the host-group topic in a group of its own; the job stage reads the events topic.
    const config =
      stage === 'shard'
        ? {
            ...base,
            topic: base.shardTopic ?? KAFKA_DEFAULTS.shardTopic,
            group: `${base.group ?? KAFKA_DEFAULTS.group}.shards`,
          }
        : base;
    const statsEvery = values['stats-interval'];
    const replayMaxAge = values['replay-max-age'];
    const replayMaxAgeMs = replayMaxAge === undefined ? undefined : replayMaxAge * 60_000;
    // A cordon option (flag or variable) asks for what only the repair loop does.
    const cordonFlag = (Object.keys(CORDON_OPTIONS) as (keyof typeof CORDON_OPTIONS)[]).find(
      (k) => from[k] !== 'default' && !('envOnly' in CORDON_OPTIONS[k]),
    );
    if (cordonFlag && values['repair-loop'] !== true)
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        `${optionName(cordonFlag, CORDON_OPTIONS[cordonFlag])} needs --repair-loop`,
      );
    const { store, where } = await openStore(values, (m) => logger.warn(m));
    const alerting = alertingFrom(values, (d) => void store.insert(deadLetterRows([d])).catch(() => {}));
    const findingsFile = values.findings
      ? findingFileSink(`file ${values.findings}`, new LineWriter(values.findings))
      : undefined;
    let pipeline: Pipeline | undefined;
    // A job stage's two groups give a job's events and its shards' records to the same process.
    const processName = stage === 'job' ? randomUUID() : undefined;
    const transportDeps = (extra: Partial<KafkaTransportDeps> = {}): KafkaTransportDeps => ({
      ...extra,
      coPartition: processName,
      log: kafkaLog,
      // kafkajs restarts its consumer every few hundred ms while the broker is away: one failure.
      onCrash: (err, restart) =>
        busFail(`kafka consumer ${restart ? 'restarting' : 'stopped'}: ${err.message}`),
      onJoin: busOk,
      onReplay: values['no-replay'] ? undefined : (d) => pipeline?.replay(d),
      onRevoked: (partitions) => pipeline?.forgetPartitions(partitions),
      replayMaxAgeMs,
      // Delivery ranges on record, so a new owner re-batches an uncommitted stretch the same way.
      boundaries: new DeliveryRanges(store),
      // They live in the store: failing to read or record them is the store failing, not the bus.
      onBoundariesRetry: (err) =>
        health.fail('store', `delivery ranges failing, batch held and retried: ${err.message}`),
      onBoundariesRecovered: () => health.ok('store'),
    });
    // A job stage holds a sharded job's events until its shards' records come: their messages are
    // committed only once what they release is out (docs/kafka.md, "A job stage killed or moved").
    const transport: KafkaTransport = new KafkaTransport(
      config,
      transportDeps(
        stage === 'job' ? { commitLimit: (p) => pipeline?.commitLimit(transport.config.topic, p) } : {},
      ),
    );
    // The job stage also reads what its shards send (their reductions, and the job's steps and
    // other events they pass on, held as the job's own are); a shard sends it.
    const records =
      stage === undefined
        ? undefined
        : new KafkaTransport(
            { ...base, topic: recordsTopic, group: `${base.group ?? KAFKA_DEFAULTS.group}.records` },
            transportDeps(
              stage === 'job' ? { commitLimit: (p) => pipeline?.commitLimit(recordsTopic, p) } : {},
            ),
          );
    const toJobStage = (rs: unknown[]) => records!.publish(batchByKey(rs));
    pipeline = buildPipeline({
      transport: stage === 'job' ? new MergedTransport([transport, records!]) : transport,
      stage,
      shardRecordsTopic: stage === 'job' ? recordsTopic : undefined,
      shardSink: stage === 'shard' ? toJobStage : undefined,
      jobStage: {
        holdMs: values['shard-hold-s'] * 1000,
        onRefused: (format, source) =>
          logger.warn(
            { format, source },
            `shard records of format ${String(format)} from ${source} refused: this job stage reads format ${SHARD_FORMAT}; run shards and job stage of one version (docs/kafka.md, "Upgrading the sharded layout")`,
          ),
      },
      idleAdvanceMs: values['idle-advance-s'] * 1000,
      store,
      storeName: where,
      storeEvents: values['no-events'] !== true,
      // Dead letters and findings go out before the offset is committed: at least once as well.
      deadLetterSinks: [busDeadLetterSink(transport)],
      findingSinks: [
        // A shard's GPU findings reach the job stage for the links (throttle explains straggler).
        ...(stage === 'shard'
          ? [{ name: `topic ${recordsTopic}`, write: (fs: Finding[]) => toJobStage(fs.map(findingRecord)) }]
          : []),
        ...(findingsFile ? [findingsFile] : []),
        ...(alerting ? [alertSink(alerting)] : []),
      ],
      onHandled: () => {
        if (busFailedAt) busOk();
      },
      // The pipeline stops fetching while the store holds a batch back. Logged once when the
      // failure starts and once when it ends, not per attempt.
      onStoreRetry: (err) =>
        health.fail('store', `store write failing, batch held and retried: ${(err as Error).message}`),
      onStoreRecovered: () => health.ok('store'),
    });
    const p = pipeline;
    log('info', p.describe());
    const jobStage = p.runner instanceof JobStageRunner ? p.runner : undefined;
    // Degraded, not failing, for 5 minutes after the latest refused record: the job stage works on,
    // its sharded jobs judged without those records, and restarting it would not help.
    if (jobStage)
      health.probe(
        'shard_records',
        () => {
          const r = jobStage.refusals();
          return r.records && Date.now() - r.at < 300_000
            ? {
                failingSince: r.since,
                reason: `${r.records} shard records of another format refused (this job stage reads format ${SHARD_FORMAT})`,
              }
            : undefined;
        },
        { degraded: true },
      );

    // A store or broker that is down (or not up yet) is waited for, with backoff, until SIGTERM.
    const waitFor = <T>(what: 'store' | 'bus', fn: () => Promise<T>) =>
      retry(fn, {
        attempts: Number.POSITIVE_INFINITY,
        baseDelayMs: 500,
        maxDelayMs: 10_000,
        signal: stopping.signal,
        onRetry: (err) => (what === 'bus' ? busFail((err as Error).message) : health.fail('store', err)),
      });
    try {
      await waitFor('store', () => store.migrate());
      health.ok('store');
    } catch (err) {
      if (!stopping.signal.aborted) throw err;
      log('info', `${await stopped}: stopped while waiting for the store`);
      await store.close();
      return 0;
    }
    const figures = () => {
      const t = transport.counters();
      const c = p.counters();
      // One walk over the jobs: a job stage's counters are its runner's and more.
      const js = jobStage?.stats();
      const r = js ?? p.runner.stats();
      return {
        batches: c.batches,
        events: c.events,
        findings: c.findings,
        dead_letters: c.dead_letters,
        dead_letters_sent: t.dead_letters_sent,
        replayed_batches: t.replayed_batches,
        replay_skipped_batches: t.replay_skipped_batches,
        commits: t.commits,
        store_retries: c.store_retries,
        shard_records_refused: jobStage?.refusals().records ?? 0,
        collectives_members_unknown: js?.collectives_members_unknown ?? 0,
        shard_steps_malformed: js?.shard_steps_malformed ?? 0,
        late_steps: r.late_steps,
        duplicate_steps: r.duplicate_steps,
      };
    };
    const stats = () => logger.info({ counters: figures() }, 'counters');
    // Behind the leader lease, fed from the store: every detect of the group writes there.
    let loop: RepairLoop | undefined;
    if (values['repair-loop'] === true) {
      loop = repairLoopFrom(values, store, {
        logger,
        // What the loop resolves itself (an Xid verified after repair) joins the findings file too.
        publish: (fs) => {
          alerting?.onFindings(fs);
          Promise.resolve(findingsFile?.write(fs)).catch(() => {}); // closed once the pipeline stopped
        },
        shared: true,
      });
      await loop.start();
      loop.watch(health);
      log('info', loop.describe());
    }
    const server = await healthServer(values['health-host'], values['health-port'], health, figures, loop);
    if (server) log('info', `health on ${server.url}/healthz, ${server.url}/metrics`);
    const timer = statsEvery > 0 ? setInterval(stats, statsEvery * 1000) : undefined;

    try {
      await waitFor('bus', async () => {
        if (stage === 'job') await samePartitions(transport, records!);
        await p.start();
      });
      busOk();
    } catch (err) {
      // Given up (a setting to fix) or stopped: either way the connections close, so the process ends.
      const given = !stopping.signal.aborted;
      if (!given) log('info', `${await stopped}: stopped while waiting for the bus`);
      clearInterval(busQuiet);
      if (timer) clearInterval(timer);
      await p.close();
      await loop?.stop();
      await store.close();
      await server?.close();
      if (given) throw err;
      return 0;
    }
    log(
      'info',
      `joined group ${transport.config.group} on ${transport.config.topic} at ${transport.config.brokers.join(',')}; storing in ${where}`,
    );

    log('info', `${await stopped}: finishing the batch in hand, committing, leaving the group`);
    clearInterval(busQuiet);
    if (timer) clearInterval(timer);
    // The batch in hand finishes and commits; with the store down it is given up after the grace
    // period (uncommitted, so the next owner gets it) instead of holding shutdown.
    await p.close(); // and its sinks: the findings file, the alerts
    if (stage === 'shard') await records?.stop();
    await loop?.stop(); // its state written, its lease given up for the next leader
    await store.close();
    stats();
    await server?.close();
    const store_ = health.report().checks.store;
    if (store_ && !store_.ok) {
      logger.error(
        `stopped without finishing: ${store_.reason}; the batch in hand stays uncommitted for the next owner`,
      );
      return 1;
    }
    return 0;
  },
};

/** A job stage's topics must be co-partitioned (docs/kafka.md, "Several job stages"). */
async function samePartitions(events: KafkaTransport, records: KafkaTransport): Promise<void> {
  const [a, b] = [await events.partitionCount(), await records.partitionCount()];
  if (a !== b)
    throw new RankwatchError(
      'RANKWATCH_ERR_CONFIG',
      `topics ${events.config.topic} (${a} partitions) and ${records.config.topic} (${b}) differ: a job stage needs a job's events and its shards' records in the same partition; give ${records.config.topic} ${a} partitions (kafka-topics.sh --alter --partitions ${a}, or recreate it)`,
    );
}

/** kafkajs lines that mean the brokers cannot be reached (as kafkajs words them, tulios/kafkajs#267, #1557). */
const UNREACHABLE =
  /ECONNREFUSED|ETIMEDOUT|ENOTFOUND|EHOSTUNREACH|Connection timeout|socket hang up|Failed to connect|NumberOfRetriesExceeded|Closed connection/i;

/** GET /healthz and GET /metrics on their own port, when asked for. */
async function healthServer(
  host: string,
  port: number | undefined,
  health: Health,
  figures: () => Record<string, number>,
  loop?: RepairLoop,
): Promise<{ url: string; close(): Promise<void> } | undefined> {
  if (port === undefined) return undefined;
  const [{ default: Fastify }, { healthRoutes }, { Metrics }, { repairLoopMetrics }, { fastifyTimeouts }] =
    await Promise.all([
      import('fastify'),
      import('../../api/routes/healthz.js'),
      import('../../core/metrics.js'),
      import('../../actions/metrics.js'),
      import('../../core/server-timeouts.js'),
    ]);
  const metrics = new Metrics().health(health).counters(
    'rankwatch_detect',
    {
      batches: 'batches handled',
      events: 'valid events processed',
      findings: 'findings emitted',
      dead_letters: 'events set aside with a reason (table dead_letters)',
      dead_letters_sent: 'dead-letter records sent to the dead-letter topic',
      commits: 'offset commits',
      store_retries: 'failed store writes retried',
      shard_records_refused: 'shard records of another format refused (job stage)',
      collectives_members_unknown:
        'collective steps not judged: their members not yet resent since a restart (job stage)',
      late_steps: 'step records that came after their step was closed (not counted in it)',
      duplicate_steps: 'step records of a rank and step already counted',
    },
    figures,
  );
  if (loop) repairLoopMetrics(metrics, loop);
  // The same timeouts as the API: a client dribbling its headers does not hold the port.
  const app = Fastify({ logger: false, ...fastifyTimeouts() });
  await app.register(healthRoutes, {
    checks: health,
    metrics,
    health: () => ({ counters: figures(), ...(loop ? { actions: loop.automation.stats() } : {}) }),
  });
  const url = await app.listen({ host, port });
  return { url, close: () => app.close() };
}
