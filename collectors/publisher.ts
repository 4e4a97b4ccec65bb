/**
 * Which Publisher a collector sends through, from its `bus` URL: http(s):// posts to
 * `rankwatch up`; kafka:// uses stream/kafka.ts; file:PATH appends JSON lines (offline runs, read
 * back by `rankwatch replay`). Each is wrapped in the disk spool when one is
 * configured, so an unreachable bus delays events instead of losing them.
 */
import { fileURLToPath } from 'node:url';
import { RankwatchError } from '../core/errors.js';
import type { Health } from '../core/health.js';
import { FilePublisher } from '../stream/file-publisher.js';
import { HttpPublisher } from '../stream/http.js';
import { isRefusal } from '../stream/isolate.js';
import { DiskSpool } from '../stream/spool.js';
import { SpoolingPublisher } from '../stream/spool-publisher.js';
import type { Batch, Publisher } from '../stream/transport.js';
import type { CollectorConfig } from './config.js';
import type { Logger } from './source.js';

export interface CollectorPublisher {
  publisher: Publisher;
  counters: () => Record<string, number>;
  /** With a spool: puts events on disk and resolves (a durable hand-off for local senders). */
  enqueue?: (batches: Batch[]) => Promise<void>;
}

/**
 * Every failure to deliver keeps the batch (in the spool when there is one, else the collector's
 * memory) and is retried: an unreachable or failing bus, 429, 5xx, and also a refused token
 * (401/403: it may be rotated) or an unexpected answer. Only an event the bus refuses on its own
 * (TRANSPORT_REJECTED, HTTP 413 alone) is set aside, counted, and the rest delivered. `health`
 * shows `bus` and `credentials` failing, with the reason, until a delivery succeeds, and `spool`
 * failing while the spool cannot be written (a full disk: events stay in memory, or with the hook
 * that sent them, and are retried) until an append succeeds.
 */
export async function publisherFor(
  cfg: CollectorConfig,
  logger: Logger,
  health?: Health,
  onRefused?: (event: unknown, reason: string) => void,
): Promise<CollectorPublisher> {
  const bus = await busPublisher(cfg, logger, onRefused);
  const inner = health ? reporting(bus, health) : bus;
  const own = () => (bus as { counters?: () => Record<string, number> }).counters?.() ?? {};
  if (!cfg.spool) return { publisher: inner, counters: own };
  health?.ok('spool');
  const spool = new DiskSpool({
    dir: cfg.spool.dir,
    maxBytes: cfg.spool.maxBytes,
    onDropOldest: (bytes) =>
      logger.warn(`spool over ${cfg.spool!.maxBytes} bytes: dropped the oldest ${bytes} bytes`),
    onAppend: (failure) =>
      failure ? health?.fail('spool', `${failure.message}; events kept and retried`) : health?.ok('spool'),
  });
  // Health logs when delivery starts and stops failing; no line per replay attempt.
  const publisher = new SpoolingPublisher(inner, spool, { isRetriable: keepsBatch, onRefused });
  return {
    publisher,
    enqueue: (batches) => publisher.enqueue(batches),
    counters: () => ({ ...own(), ...publisher.counters(), spool_bytes: publisher.spooledBytes() }),
  };
}

/** Every failure but a refused event or a stopped publisher: the batch is kept and retried. */
export function keepsBatch(err: unknown): boolean {
  return !isRefusal(err) && !(err instanceof RankwatchError && err.code === 'RANKWATCH_ERR_STOPPED');
}

/** The bus publisher, reporting each attempt to the health checks. */
function reporting(inner: Publisher, health: Health): Publisher {
  health.ok('bus');
  health.ok('credentials');
  return {
    type: inner.type,
    async publish(batches) {
      try {
        await inner.publish(batches);
      } catch (err) {
        if (!isRefusal(err)) {
          const auth = err instanceof RankwatchError && err.code === 'RANKWATCH_ERR_UNAUTHORIZED';
          health.fail(auth ? 'credentials' : 'bus', `${(err as Error).message}; events kept and retried`);
        }
        throw err;
      }
      health.ok('bus');
      health.ok('credentials');
    },
    stop: () => inner.stop(),
    counters: (inner as { counters?: () => Record<string, number> }).counters?.bind(inner),
  } as Publisher;
}

async function busPublisher(
  cfg: CollectorConfig,
  logger: Logger,
  onRefused?: (event: unknown, reason: string) => void,
): Promise<Publisher> {
  if (cfg.bus.startsWith('file:')) return FilePublisher.open(filePath(cfg.bus));
  const url = new URL(cfg.bus);
  if (url.protocol === 'http:' || url.protocol === 'https:')
    return new HttpPublisher({
      url: cfg.bus,
      token: cfg.token,
      onRefused,
      onRejected: (n, errors) =>
        logger.warn(
          `ingest rejected ${n} event(s): ${errors
            .slice(0, 3)
            .map((e) => `line ${e.line}: ${e.reason}`)
            .join('; ')}`,
        ),
    });
  if (url.protocol === 'kafka:') return kafkaPublisher(url, logger);
  throw new RankwatchError(
    'RANKWATCH_ERR_CONFIG',
    `bus: "${cfg.bus}" is neither http(s)://, kafka:// nor file:PATH`,
  );
}

/** file:///abs/path (a URL) or file:path (as typed, relative to the working folder). */
function filePath(bus: string): string {
  return bus.startsWith('file://') ? fileURLToPath(bus) : bus.slice('file:'.length);
}

/**
 * kafka://broker1:9092,broker2:9092/topic → the Kafka transport's producer side. Loaded only when
 * used, so HTTP-only collectors never load the Kafka client. TLS/SASL and the rest come from the
 * same RANKWATCH_KAFKA_* environment as `rankwatch detect` (docs/kafka.md).
 */
async function kafkaPublisher(url: URL, logger: Logger): Promise<Publisher> {
  const { KafkaTransport } = await import('../stream/kafka.js');
  const { kafkaConfigFrom } = await import('../stream/kafka-config.js');
  const brokers = decodeURIComponent(url.host);
  const topic = url.pathname.replace(/^\//, '') || undefined;
  const config = kafkaConfigFrom({ brokers, topic }, process.env);
  const log = (level: string, msg: string) => (level === 'info' ? logger.info(msg) : logger.warn(msg));
  return new KafkaTransport(config, { log });
}
