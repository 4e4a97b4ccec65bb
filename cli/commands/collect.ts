import { existsSync, statSync } from 'node:fs';
import { Collector } from '../../collectors/collector.js';
import { ingestLimitsOf, loadCollectorConfig } from '../../collectors/config.js';
import { startHealthServer } from '../../collectors/health.js';
import { createSources, SOURCES } from '../../collectors/index.js';
import { publisherFor } from '../../collectors/publisher.js';
import { parseAddress, RAS_DEFAULT_ADDRESS } from '../../collectors/sources/nccl_ras.js';
import { RankwatchError } from '../../core/errors.js';
import { Health } from '../../core/health.js';
import { createLogger } from '../../core/log.js';
import { HostGroupKeys } from '../../stream/host-groups.js';
import { type Command, defineOptions, optionsHelp, parseOptions } from '../args.js';

const COLLECT_OPTIONS = defineOptions({
  config: {
    kind: 'file',
    help: 'JSON config (see docs/collectors/deploy.md); the options below override it',
  },
  bus: {
    kind: 'string',
    arg: 'URL',
    defaultText: 'http://127.0.0.1:7070',
    help: 'http://host:7070 (rankwatch up) or kafka://broker1:9092,broker2:9092/topic; TLS/SASL from RANKWATCH_KAFKA_* (docs/kafka.md); or file:PATH: JSON lines appended to PATH, for `rankwatch replay` (offline runs)',
  },
  token: { kind: 'string', arg: 'T', env: 'RANKWATCH_TOKEN', help: 'bearer token for HTTP ingest' },
  host: { kind: 'string', arg: 'NAME', defaultText: 'hostname', help: "this node's name in events" },
  spool: { kind: 'file', arg: 'DIR', help: 'keep batches on disk while the bus is unreachable' },
  'spool-max-mb': {
    kind: 'number',
    default: 1024,
    help: 'cap of --spool; the oldest batches are dropped past it',
  },
  'health-port': {
    kind: 'number',
    integer: true,
    max: 65_535,
    help: 'serve GET /metrics, GET /healthz and POST /v1/ingest (for the Python hook) on 127.0.0.1:N (0: any free port)',
  },
  'flush-ms': {
    kind: 'number',
    integer: true,
    min: 10,
    defaultText: '1000',
    help: 'longest an event waits before it is sent',
  },
  'host-group-size': {
    kind: 'number',
    integer: true,
    arg: 'N',
    defaultText: '0',
    help: 'the sharded layout for jobs past one detect process (docs/operations.md, Capacity): key GPU samples and collectives by JOB/hostgroup-G, N hosts (by rank / GPUs per host) per group; 0 keys everything by job',
  },
});

const SOURCE_FLAG_OPTIONS = defineOptions({
  dcgm: { kind: 'url', help: 'dcgm-exporter metrics (e.g. http://127.0.0.1:9400/metrics)' },
  'nvidia-smi': { kind: 'boolean', help: 'sample nvidia-smi every second (where no exporter runs)' },
  'kernel-log': { kind: 'string', arg: 'SRC', help: 'XIDs from "journal", "kmsg" or a log FILE' },
  'megatron-log': {
    kind: 'file',
    help: 'Megatron-LM log; needs --job (and --rank, --gpu of the rank writing it); --gpu-model NAME (e.g. H100-SXM) gives its job an MFU',
  },
  'gpu-model': { kind: 'string', arg: 'NAME', help: 'GPU model of the --megatron-log job' },
  'nccl-log': { kind: 'file', help: 'PyTorch NCCL watchdog timeouts from a training log' },
  'nccl-tests': { kind: 'file', help: 'nccl-tests output (one check event per run)' },
  'nccl-inspector': {
    kind: 'file',
    arg: 'DIR',
    help: "NCCL Inspector dumps (NCCL_INSPECTOR_DUMP_DIR: JSON v4.x, verbose or not, or Prometheus textfiles), reduced to one collective event per rank, step, communicator and op; ranks and steps from the hook's step events (give --health-port) or the processes' RANK and job variables (docs/collectors/nccl-inspector.md)",
  },
  'nccl-inspector-all-hosts': {
    kind: 'boolean',
    help: "read every host's files in that folder, not only this node's",
  },
  'flight-recorder': {
    kind: 'file',
    arg: 'DIR|FILE',
    help: 'PyTorch Flight Recorder dumps (the folder TORCH_FR_DUMP_TEMP_FILE writes per-rank pickles to; no PyTorch needed) or an fr_trace report file: ranks that never joined a collective, size/type/dtype mismatches',
  },
  'nccl-ras': {
    kind: 'string',
    arg: '[HOST:PORT|FILE]',
    help: `poll NCCL's RAS port (NCCL >= 2.24; default ${RAS_DEFAULT_ADDRESS}, JSON from 2.28.7) or read a saved ncclras output: unresponsive, dead and missing ranks, errors, stalled operation counts. RAS "OK" is not proof of health`,
  },
  job: {
    kind: 'string',
    arg: 'ID',
    help: 'job of the log sources above (GPU telemetry takes its job from Kubernetes pod labels, or from "job" in the config file)',
  },
  rank: { kind: 'number', integer: true, default: 0, help: 'rank of the log sources above' },
  gpu: { kind: 'number', integer: true, default: 0, help: 'GPU of the log sources above' },
  from: {
    kind: 'enum',
    values: ['start', 'end'],
    defaultText: 'end',
    help: 'read log files (and dumps there at start) from the start or only new lines',
  },
});

const OPTIONS = defineOptions({ ...COLLECT_OPTIONS, ...SOURCE_FLAG_OPTIONS });

export const collect: Command = {
  name: 'collect',
  usage: `rankwatch collect [--config FILE] [options]

Runs on every GPU node. Turns what the node already produces into v1 events, batches and
compresses them, and sends them to the bus: \`rankwatch up\` over HTTP, or Kafka. With --spool,
batches wait on disk while the bus is unreachable. A failing source (exporter down, log rotated,
permission denied) is reported and retried; it never stops the others. Stops cleanly on
SIGINT/SIGTERM (sources first, then what is buffered is sent).

${optionsHelp(COLLECT_OPTIONS)}
Sources (each flag adds one; the config file can hold any number):
${optionsHelp(SOURCE_FLAG_OPTIONS)}
Known source types: ${SOURCES.map((s) => s.type).join(', ')}`,
  options: OPTIONS,
  async run(argv) {
    // `--nccl-ras` alone (last, or before another flag) means RAS's default address.
    const at = argv.indexOf('--nccl-ras');
    if (at >= 0 && (at === argv.length - 1 || argv[at + 1].startsWith('-')))
      argv = [...argv.slice(0, at + 1), RAS_DEFAULT_ADDRESS, ...argv.slice(at + 1)];
    const { values } = parseOptions(argv, OPTIONS);
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const from = values.from;
    const job = values.job;
    const fromFlags: unknown[] = [];
    if (values.dcgm) fromFlags.push({ type: 'dcgm_exporter', url: values.dcgm });
    if (values['nvidia-smi']) fromFlags.push({ type: 'nvidia_smi' });
    if (values['kernel-log']) {
      const k = values['kernel-log'];
      fromFlags.push(
        k === 'journal' || k === 'kmsg'
          ? { type: 'kernel_log', mode: k }
          : { type: 'kernel_log', mode: 'file', path: k, ...(from ? { from } : {}) },
      );
    }
    if (values['megatron-log']) {
      if (!job) throw new RankwatchError('RANKWATCH_ERR_USAGE', '--megatron-log needs --job');
      fromFlags.push({
        type: 'megatron_log',
        path: values['megatron-log'],
        job,
        rank: values.rank,
        gpu: values.gpu,
        ...(from ? { from } : {}),
        ...(values['gpu-model'] ? { gpuModel: values['gpu-model'] } : {}),
      });
    }
    if (values['nccl-log'])
      fromFlags.push({
        type: 'nccl_watchdog',
        path: values['nccl-log'],
        ...(job ? { job } : {}),
        ...(from ? { from } : {}),
      });
    if (values['nccl-tests'])
      fromFlags.push({ type: 'nccl_tests', path: values['nccl-tests'], ...(job ? { job } : {}) });
    if (values['nccl-inspector'] && statSync(values['nccl-inspector'], { throwIfNoEntry: false })?.isFile())
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        `${values['nccl-inspector']} is a file, --nccl-inspector needs the folder the plugin writes to (NCCL_INSPECTOR_DUMP_DIR)`,
      );
    if (values['nccl-inspector'])
      fromFlags.push({
        type: 'nccl_inspector',
        dir: values['nccl-inspector'],
        ...(values['nccl-inspector-all-hosts'] ? { hosts: 'all' } : {}),
        ...(from ? { from } : {}),
      });
    else if (values['nccl-inspector-all-hosts'])
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        '--nccl-inspector-all-hosts needs --nccl-inspector DIR',
      );
    if (values['flight-recorder'])
      fromFlags.push({ type: 'flight_recorder', path: values['flight-recorder'], ...(job ? { job } : {}) });
    if (values['nccl-ras']) {
      // HOST:PORT unless a file of that name exists (a saved output).
      const v = values['nccl-ras'];
      const file = !parseAddress(v) || existsSync(v);
      if (file && !existsSync(v) && /^[^/]*:/.test(v))
        throw new RankwatchError(
          'RANKWATCH_ERR_USAGE',
          `--nccl-ras needs HOST:PORT (e.g. ${RAS_DEFAULT_ADDRESS}) or a saved ncclras output file, got "${v}"`,
        );
      fromFlags.push({ type: 'nccl_ras', ...(file ? { path: v } : { address: v }), ...(job ? { job } : {}) });
    }

    const cfg = loadCollectorConfig(
      values.config,
      {
        bus: values.bus,
        token: values.token,
        host: values.host,
        flushMs: values['flush-ms'],
        hostGroupSize: values['host-group-size'],
        spool: values.spool ? { dir: values.spool, maxBytes: values['spool-max-mb'] * (1 << 20) } : undefined,
      },
      fromFlags,
    );
    if (values['health-port'] !== undefined) cfg.health.port = values['health-port'];
    if (cfg.sources.length === 0 && cfg.health.port < 0)
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        'nothing to collect: give --dcgm, --nvidia-smi, --kernel-log, --megatron-log, --flight-recorder, --nccl-ras, … or a --config file (or --health-port for hook ingest alone)',
      );

    const logger = createLogger('rankwatch collect');
    const health = new Health(logger);
    let collector: Collector | undefined;
    const { publisher, counters, enqueue } = await publisherFor(cfg, logger, health, (event, reason) =>
      collector?.refuse(event, reason),
    );
    collector = new Collector({
      publisher,
      logger,
      flushMs: cfg.flushMs,
      maxBatchEvents: cfg.maxBatchEvents,
      maxBufferedEvents: cfg.maxBufferedEvents,
      extraCounters: counters,
      keys: cfg.hostGroupSize > 0 ? new HostGroupKeys({ groupHosts: cfg.hostGroupSize }) : undefined,
    });
    const sources = createSources(cfg.sources, collector.deps(cfg.host));
    const server =
      cfg.health.port >= 0
        ? await startHealthServer(cfg.health.host, cfg.health.port, {
            counters: () => collector.counters(),
            // With a spool the hook's 200 means "on disk here"; without, "in this process's memory".
            ingest: (events) => collector.handOff(events, enqueue),
            health,
            ingestFrom: cfg.health.ingest,
            ...ingestLimitsOf(cfg.health),
          })
        : undefined;
    collector.start(sources);
    logger.info(
      `host ${cfg.host}, ${sources.length} source(s) (${sources.map((s) => s.name).join(', ')}) → ${cfg.bus}${cfg.spool ? `, spool ${cfg.spool.dir}` : ''}${server ? `; health on ${server.url}/healthz, ${server.url}/metrics` : ''}`,
    );
    const stats =
      cfg.statsEveryMs > 0
        ? setInterval(() => logger.info({ counters: collector.counters() }, 'counters'), cfg.statsEveryMs)
        : undefined;
    await new Promise<void>((resolve) => {
      process.once('SIGINT', () => resolve());
      process.once('SIGTERM', () => resolve());
    });
    clearInterval(stats);
    logger.info('stopping: sources first, then sending what is buffered');
    const abandoned = await collector.stop();
    await server?.close();
    logger.info({ counters: collector.counters() }, 'stopped');
    if (abandoned > 0) {
      logger.error(
        `stopped without delivering ${abandoned} event(s): ${health.failing() ?? 'the bus refused them'}; run with --spool DIR to keep them across restarts`,
      );
      return 1;
    }
    return 0;
  },
};
