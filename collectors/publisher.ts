/**
 * Which Publisher a collector sends through, from its `bus` URL: http(s):// posts to
 * `rankwatch up`; kafka:// uses stream/kafka.ts. Either is wrapped in the disk spool when one is
 * configured, so an unreachable bus delays events instead of losing them.
 */
import { RankwatchError } from '../core/errors.js';
import { HttpPublisher } from '../stream/http.js';
import { DiskSpool, SpoolingPublisher } from '../stream/spool.js';
import type { Publisher } from '../stream/transport.js';
import type { CollectorConfig } from './config.js';
import type { Logger } from './source.js';

export async function publisherFor(
  cfg: CollectorConfig,
  logger: Logger,
): Promise<{ publisher: Publisher; counters: () => Record<string, number> }> {
  const inner = await busPublisher(cfg, logger);
  const own = () => (inner as { counters?: () => Record<string, number> }).counters?.() ?? {};
  if (!cfg.spool) return { publisher: inner, counters: own };
  const spool = new DiskSpool({
    dir: cfg.spool.dir,
    maxBytes: cfg.spool.maxBytes,
    onDropOldest: (bytes) =>
      logger.warn(`spool over ${cfg.spool!.maxBytes} bytes: dropped the oldest ${bytes} bytes`),
  });
  let failures = 0;
  const publisher = new SpoolingPublisher(inner, spool, {
    onReplayError: (err, attempt) => {
      failures++;
      if (attempt === 1 || Number.isInteger(Math.log10(failures)))
        logger.warn(`bus unreachable, spooling to ${cfg.spool!.dir}: ${(err as Error).message}`);
    },
  });
  return {
    publisher,
    counters: () => ({ ...own(), ...publisher.counters(), spool_bytes: publisher.spooledBytes() }),
  };
}

async function busPublisher(cfg: CollectorConfig, logger: Logger): Promise<Publisher> {
  const url = new URL(cfg.bus);
  if (url.protocol === 'http:' || url.protocol === 'https:')
    return new HttpPublisher({
      url: cfg.bus,
      token: cfg.token,
      onRejected: (n, errors) =>
        logger.warn(
          `ingest rejected ${n} event(s): ${errors
            .slice(0, 3)
            .map((e) => `line ${e.line}: ${e.reason}`)
            .join('; ')}`,
        ),
    });
  if (url.protocol === 'kafka:') return kafkaPublisher(url, logger);
  throw new RankwatchError('RANKWATCH_ERR_CONFIG', `bus: "${cfg.bus}" is neither http(s):// nor kafka://`);
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
