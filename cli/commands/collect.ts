import { statSync } from 'node:fs';
import { Collector } from '../../collectors/collector.js';
import { loadCollectorConfig } from '../../collectors/config.js';
import { startHealthServer } from '../../collectors/health.js';
import { createSources, SOURCES } from '../../collectors/index.js';
import { publisherFor } from '../../collectors/publisher.js';
import { RankwatchError } from '../../core/errors.js';
import { Health } from '../../core/health.js';
import { createLogger } from '../../core/log.js';
import { type Command, num, parse } from '../args.js';

export const collect: Command = {
  name: 'collect',
  usage: `rankwatch collect [--config FILE] [options]

Runs on every GPU node. Turns what the node already produces into v1 events, batches and
compresses them, and sends them to the bus: \`rankwatch up\` over HTTP, or Kafka. With --spool,
batches wait on disk while the bus is unreachable. A failing source (exporter down, log rotated,
permission denied) is reported and retried; it never stops the others. Stops cleanly on
SIGINT/SIGTERM (sources first, then what is buffered is sent).

  --config FILE        JSON config (see docs/collectors/deploy.md); flags below override it
  --bus URL            http://host:7070 (rankwatch up, the default http://127.0.0.1:7070) or
                       kafka://broker1:9092,broker2:9092/topic; TLS/SASL from RANKWATCH_KAFKA_* (docs/kafka.md);
                       or file:PATH: JSON lines appended to PATH, for \`rankwatch replay\` (offline runs)
  --token T            bearer token for HTTP ingest (default $RANKWATCH_TOKEN)
  --host NAME          this node's name in events (default: hostname)
  --spool DIR          keep batches on disk while the bus is unreachable (--spool-max-mb, default 1024)
  --health-port N      serve GET /metrics, GET /healthz and POST /v1/ingest (for the Python hook)
                       on 127.0.0.1:N (0: any free port)
  --flush-ms N         longest an event waits before it is sent (default 1000)
Sources (each flag adds one; the config file can hold any number):
  --dcgm URL           dcgm-exporter metrics (e.g. http://127.0.0.1:9400/metrics)
  --nvidia-smi         sample nvidia-smi every second (where no exporter runs)
  --kernel-log SRC     XIDs from "journal", "kmsg" or a log FILE
  --megatron-log FILE  Megatron-LM log; needs --job (and --rank, --gpu of the rank writing it);
                       --gpu-model NAME (e.g. H100-SXM) gives its job an MFU
  --nccl-log FILE      PyTorch NCCL watchdog timeouts from a training log
  --nccl-tests FILE    nccl-tests output (one check event per run)
  --nccl-inspector DIR NCCL Inspector dumps (NCCL_INSPECTOR_DUMP_DIR: JSON v4.x, verbose or not, or
                       Prometheus textfiles), reduced to one collective event per rank, step,
                       communicator and op; ranks and steps from the hook's step events (give
                       --health-port) or the processes' RANK and job variables (docs/collectors/nccl-inspector.md)
  --nccl-inspector-all-hosts  read every host's files in that folder, not only this node's
  --job ID --rank N --gpu N   job/rank/gpu for the log sources above (GPU telemetry takes its
                       job from Kubernetes pod labels, or from "job" in the config file)
  --from start|end     read log files (and dumps there at start) from the start or only new lines (default end)
Known source types: ${SOURCES.map((s) => s.type).join(', ')}`,
  async run(argv) {
    const { values } = parse(argv, {
      config: { type: 'string' },
      bus: { type: 'string' },
      token: { type: 'string' },
      host: { type: 'string' },
      spool: { type: 'string' },
      'spool-max-mb': { type: 'string' },
      'health-port': { type: 'string' },
      'flush-ms': { type: 'string' },
      dcgm: { type: 'string' },
      'nvidia-smi': { type: 'boolean' },
      'kernel-log': { type: 'string' },
      'megatron-log': { type: 'string' },
      'gpu-model': { type: 'string' },
      'nccl-log': { type: 'string' },
      'nccl-tests': { type: 'string' },
      'nccl-inspector': { type: 'string' },
      'nccl-inspector-all-hosts': { type: 'boolean' },
      job: { type: 'string' },
      rank: { type: 'string' },
      gpu: { type: 'string' },
      from: { type: 'string' },
    });
    if (values.help) {
      console.log(this.usage);
      return 0;
    }
    const from = values.from;
    if (from !== undefined && from !== 'start' && from !== 'end')
      throw new RankwatchError('RANKWATCH_ERR_USAGE', `--from needs start or end, got "${from}"`);
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
        rank: num(values.rank, 'rank', 0),
        gpu: num(values.gpu, 'gpu', 0),
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

    const cfg = loadCollectorConfig(
      values.config,
      {
        bus: values.bus,
        token: values.token,
        host: values.host,
        flushMs: values['flush-ms'] !== undefined ? num(values['flush-ms'], 'flush-ms') : undefined,
        spool: values.spool
          ? { dir: values.spool, maxBytes: num(values['spool-max-mb'], 'spool-max-mb', 1024) * (1 << 20) }
          : undefined,
      },
      fromFlags,
    );
    if (values['health-port'] !== undefined) cfg.health.port = num(values['health-port'], 'health-port');
    if (cfg.sources.length === 0 && cfg.health.port < 0)
      throw new RankwatchError(
        'RANKWATCH_ERR_USAGE',
        'nothing to collect: give --dcgm, --nvidia-smi, --kernel-log, --megatron-log, … or a --config file (or --health-port for hook ingest alone)',
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
