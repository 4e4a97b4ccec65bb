/**
 * The ClickHouse schema, as ordered migrations. The same DDL runs on chDB (embedded) and on a
 * ClickHouse server. Tables are ReplacingMergeTree keyed on what identifies a row, so a batch
 * delivered twice leaves one copy; readers use FINAL. Time series use Delta/DoubleDelta/Gorilla
 * codecs, names are LowCardinality, raw events expire after `rawTtlDays`.
 */

export interface Migration {
  version: number;
  name: string;
  statements: (opts: SchemaOptions) => string[];
}

export interface SchemaOptions {
  /** Days raw events are kept. */
  rawTtlDays: number;
}

export const SCHEMA_DEFAULTS: SchemaOptions = { rawTtlDays: 30 };

const TS = "DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1))";

export const MIGRATIONS: Migration[] = [
  {
    version: 1,
    name: 'events, steps, mfu, step rollups, findings, dead letters',
    statements: ({ rawTtlDays }) => [
      `CREATE TABLE IF NOT EXISTS events (
        ts ${TS},
        kind LowCardinality(String),
        job LowCardinality(String),
        host LowCardinality(String),
        gpu Int16,
        rank Int32,
        step Int64,
        raw String CODEC(ZSTD(3))
      ) ENGINE = ReplacingMergeTree
      PARTITION BY toYYYYMMDD(ts)
      ORDER BY (kind, job, host, ts, cityHash64(raw))
      TTL toDateTime(ts) + INTERVAL ${Math.max(1, Math.floor(rawTtlDays))} DAY`,
      `CREATE TABLE IF NOT EXISTS steps (
        ts ${TS},
        job LowCardinality(String),
        step UInt64 CODEC(Delta, ZSTD(1)),
        rank UInt32,
        host LowCardinality(String),
        gpu Int16,
        stage Int16,
        step_ms Float32 CODEC(Gorilla, ZSTD(1)),
        compute_ms Float32 CODEC(Gorilla, ZSTD(1)),
        comm_wait_ms Nullable(Float32),
        tokens Float64
      ) ENGINE = ReplacingMergeTree
      PARTITION BY toYYYYMMDD(ts)
      ORDER BY (job, step, rank)`,
      `CREATE TABLE IF NOT EXISTS mfu (
        ts ${TS},
        job LowCardinality(String),
        step UInt64,
        step_ms Float64 CODEC(Gorilla, ZSTD(1)),
        tokens Float64,
        tflops_per_gpu Float64 CODEC(Gorilla, ZSTD(1)),
        mfu Float64 CODEC(Gorilla, ZSTD(1))
      ) ENGINE = ReplacingMergeTree
      PARTITION BY toYYYYMMDD(ts)
      ORDER BY (job, step)`,
      `CREATE TABLE IF NOT EXISTS step_rollups (
        ts ${TS},
        job LowCardinality(String),
        step UInt64,
        stage Int16,
        ranks UInt32,
        step_ms Float64,
        compute_p50_ms Float64,
        compute_max_ms Float64,
        compute_max_rank Int32,
        comm_wait_p50_ms Float64
      ) ENGINE = ReplacingMergeTree
      PARTITION BY toYYYYMMDD(ts)
      ORDER BY (job, step, stage)`,
      `CREATE TABLE IF NOT EXISTS findings (
        ts ${TS},
        id String,
        state LowCardinality(String),
        type LowCardinality(String),
        job LowCardinality(String),
        host LowCardinality(String),
        gpu Nullable(Int16),
        rank Nullable(Int32),
        peer_host Nullable(String),
        severity LowCardinality(String),
        onset_ts Nullable(DateTime64(3, 'UTC')),
        est_cost_pct Nullable(Float64),
        action LowCardinality(String),
        summary String,
        related Array(String),
        raw String CODEC(ZSTD(3))
      ) ENGINE = ReplacingMergeTree
      PARTITION BY toYYYYMMDD(ts)
      ORDER BY (id, state, ts)`,
      `CREATE TABLE IF NOT EXISTS dead_letters (
        ts ${TS},
        source LowCardinality(String),
        reason String,
        raw String CODEC(ZSTD(3))
      ) ENGINE = ReplacingMergeTree
      PARTITION BY toYYYYMMDD(ts)
      ORDER BY (source, cityHash64(raw), reason)`,
    ],
  },
];

export const MIGRATIONS_TABLE = `CREATE TABLE IF NOT EXISTS schema_migrations (
  version UInt32,
  name String,
  applied_at DateTime64(3, 'UTC')
) ENGINE = ReplacingMergeTree ORDER BY version`;
