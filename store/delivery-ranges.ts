/**
 * Where the Kafka consumer records each delivery's offset range before its store write, so that a
 * new owner of the partition batches an uncommitted stretch exactly as the last owner did and its
 * inserts carry the same deduplication token (`topic/partition/first-last`): a message written
 * once, then re-batched with others after a crash, would otherwise count twice in the rollups
 * (materialized views see every inserted block). One small insert per delivery; see docs/kafka.md.
 */
import type { Store } from './store.js';

type Execs = Pick<Store, 'exec' | 'query' | 'insert'>;

const TABLE = `CREATE TABLE IF NOT EXISTS kafka_deliveries (
  topic LowCardinality(String),
  partition UInt32,
  first UInt64,
  last UInt64,
  at DateTime64(3, 'UTC')
) ENGINE = ReplacingMergeTree
ORDER BY (topic, partition, first, last)
TTL toDateTime(at) + INTERVAL 7 DAY`;

export class DeliveryRanges {
  private ready: Promise<void> | undefined;

  constructor(private readonly db: Execs) {}

  private ensure(): Promise<void> {
    this.ready ??= this.db.exec(TABLE).catch((err) => {
      this.ready = undefined;
      throw err;
    });
    return this.ready;
  }

  async record(topic: string, partition: number, first: number, last: number): Promise<void> {
    await this.ensure();
    await this.db.insert([
      {
        table: 'kafka_deliveries',
        rows: [JSON.stringify({ topic, partition, first, last, at: Date.now() })],
      },
    ]);
  }

  /** Ranges recorded for a partition that end at or after `from` (the committed offset): first → last. */
  async load(topic: string, partition: number, from: number): Promise<Map<number, number>> {
    await this.ensure();
    const rows = await this.db.query<{ first: number; upto: number }>(
      `SELECT first, max(last) AS upto FROM kafka_deliveries
       WHERE topic = {t:String} AND partition = {p:UInt32} AND last >= {from:UInt64}
       GROUP BY first ORDER BY first`,
      { t: topic, p: partition, from },
    );
    return new Map(rows.map((r) => [Number(r.first), Number(r.upto)]));
  }
}
