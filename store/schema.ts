/**
 * The ClickHouse schema, as ordered migrations. The same DDL runs on chDB (embedded) and on a
 * ClickHouse server. Tables are ReplacingMergeTree keyed on what identifies a row, so a batch
 * delivered twice leaves one copy; readers use FINAL. Time series use Delta/DoubleDelta/Gorilla
 * codecs, names are LowCardinality, raw events expire after `rawTtlDays`.
 *
 * Migration 2 adds per-minute rollups (materialized views into AggregatingMergeTree) and tables
 * derived from raw events (faults, checkpoints, job lifecycle). A materialized view sees every
 * inserted block, duplicates included, and sums cannot be undone by a later merge; so the MV
 * sources keep a block-deduplication window and every driver inserts with
 * `deduplicate_blocks_in_dependent_materialized_views = 1` (INSERT_SETTINGS): a batch delivered
 * again is dropped whole, before any view sees it, and rollups stay equal to the raw rows.
 * Never add a migration that rewrites an applied one: add the next version.
 */

export interface Migration {
  version: number;
  name: string;
  statements: (opts: SchemaOptions) => string[];
}

export interface SchemaOptions {
  /** Days raw events and per-step rows are kept. */
  rawTtlDays: number;
  /** Days per-minute rollups and derived fault/checkpoint/job tables are kept. */
  rollupTtlDays: number;
}

export const SCHEMA_DEFAULTS: SchemaOptions = { rawTtlDays: 30, rollupTtlDays: 400 };

/** Inserted blocks remembered per table, so a redelivered batch is recognised and dropped. */
export const DEDUP_WINDOW = 10_000;

/** Settings every driver sends with every insert (see the header comment). */
export const INSERT_SETTINGS = { deduplicate_blocks_in_dependent_materialized_views: 1 } as const;

/** Every table and view the schema owns, in drop order (views before what they read and write). */
export const SCHEMA_OBJECTS = [
  'automation_state',
  'automation_lease',
  'node_health',
  'action_audit',
  'job_minute_mv',
  'rank_minute_mv',
  'gpu_minute_mv',
  'faults_mv',
  'checkpoints_mv',
  'job_events_mv',
  'job_minute',
  'rank_minute',
  'gpu_minute',
  'faults',
  'checkpoints',
  'job_events',
  'events',
  'steps',
  'mfu',
  'step_rollups',
  'findings',
  'finding_acks',
  'dead_letters',
  'slow_gpus',
  'schema_migrations',
] as const;

const days = (n: number) => Math.max(1, Math.floor(n));

/** TTL clauses, kept in one place so `migrate` can bring existing tables to the configured values. */
export function ttlTargets(opts: SchemaOptions): { table: string; ttl: string }[] {
  const raw = days(opts.rawTtlDays);
  const roll = days(opts.rollupTtlDays);
  return [
    { table: 'events', ttl: `toDateTime(ts) + toIntervalDay(${raw})` },
    { table: 'steps', ttl: `toDateTime(ts) + toIntervalDay(${raw})` },
    ...['job_minute', 'rank_minute', 'gpu_minute'].map((table) => ({
      table,
      ttl: `minute + toIntervalDay(${roll})`,
    })),
    ...['faults', 'checkpoints', 'job_events', 'slow_gpus'].map((table) => ({
      table,
      ttl: `toDateTime(ts) + toIntervalDay(${roll})`,
    })),
  ];
}

const MIN = "DateTime('UTC') CODEC(DoubleDelta, ZSTD(1))";
const DEDUP = `SETTINGS non_replicated_deduplication_window = ${DEDUP_WINDOW}`;
const minuteOf = "toStartOfMinute(toDateTime(ts, 'UTC'))";
/** Integer fields of a raw event, -1 when absent (JSON has no integer/absent distinction in ClickHouse). */
const jInt = (f: string) => `if(JSONHas(raw, '${f}'), JSONExtractInt(raw, '${f}'), -1)`;

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
  {
    version: 2,
    name: 'per-minute rollups (job, rank, host/gpu); faults, checkpoints, job lifecycle from raw events',
    statements: ({ rollupTtlDays }) => {
      const ttlMinute = `TTL minute + INTERVAL ${days(rollupTtlDays)} DAY`;
      const ttlTs = `TTL toDateTime(ts) + INTERVAL ${days(rollupTtlDays)} DAY`;
      return [
        // Sources of materialized views remember recent blocks, so a redelivered batch never reaches a view.
        `ALTER TABLE events MODIFY SETTING non_replicated_deduplication_window = ${DEDUP_WINDOW}`,
        `ALTER TABLE steps MODIFY SETTING non_replicated_deduplication_window = ${DEDUP_WINDOW}`,
        // Per job and minute: what the jobs list and the job overview read.
        `CREATE TABLE IF NOT EXISTS job_minute (
          minute ${MIN},
          job LowCardinality(String),
          rows AggregateFunction(count),
          ranks AggregateFunction(uniqExact, UInt32),
          steps AggregateFunction(uniqExact, UInt64),
          first_step SimpleAggregateFunction(min, UInt64),
          last_step SimpleAggregateFunction(max, UInt64),
          step_ms AggregateFunction(avg, Float32),
          compute_ms AggregateFunction(avg, Float32),
          compute_max_ms SimpleAggregateFunction(max, Float32)
        ) ENGINE = AggregatingMergeTree
        PARTITION BY toYYYYMMDD(minute)
        ORDER BY (job, minute)
        ${ttlMinute}
        ${DEDUP}`,
        `CREATE MATERIALIZED VIEW IF NOT EXISTS job_minute_mv TO job_minute AS
        SELECT ${minuteOf} AS minute, job,
          countState() AS rows, uniqExactState(s.rank) AS ranks, uniqExactState(s.step) AS steps,
          min(s.step) AS first_step, max(s.step) AS last_step,
          avgState(s.step_ms) AS step_ms, avgState(s.compute_ms) AS compute_ms,
          max(s.compute_ms) AS compute_max_ms
        FROM steps AS s GROUP BY minute, job`,
        // Per rank and minute: the compute heatmap. Ordered by (job, minute, rank) for a job's time range.
        `CREATE TABLE IF NOT EXISTS rank_minute (
          minute ${MIN},
          job LowCardinality(String),
          rank UInt32,
          host SimpleAggregateFunction(anyLast, String),
          gpu SimpleAggregateFunction(anyLast, Int16),
          stage SimpleAggregateFunction(anyLast, Int16),
          steps AggregateFunction(count),
          step_ms AggregateFunction(avg, Float32),
          compute_ms AggregateFunction(avg, Float32),
          compute_max_ms SimpleAggregateFunction(max, Float32),
          comm_wait_ms AggregateFunction(avg, Nullable(Float32))
        ) ENGINE = AggregatingMergeTree
        PARTITION BY toYYYYMMDD(minute)
        ORDER BY (job, minute, rank)
        ${ttlMinute}
        ${DEDUP}`,
        `CREATE MATERIALIZED VIEW IF NOT EXISTS rank_minute_mv TO rank_minute AS
        SELECT ${minuteOf} AS minute, job, rank,
          anyLast(toString(s.host)) AS host, anyLast(s.gpu) AS gpu, anyLast(s.stage) AS stage,
          countState() AS steps, avgState(s.step_ms) AS step_ms, avgState(s.compute_ms) AS compute_ms,
          max(s.compute_ms) AS compute_max_ms, avgState(s.comm_wait_ms) AS comm_wait_ms
        FROM steps AS s GROUP BY minute, job, rank`,
        // Per host, GPU and minute, from gpu telemetry: clocks, power, heat, throttling that matters
        // (HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80 = 0xE8).
        `CREATE TABLE IF NOT EXISTS gpu_minute (
          minute ${MIN},
          host LowCardinality(String),
          gpu Int16,
          samples AggregateFunction(count),
          sm_clock_mhz AggregateFunction(avg, Float64),
          sm_clock_min_mhz SimpleAggregateFunction(min, Float64),
          power_w AggregateFunction(avg, Float64),
          temp_max_c SimpleAggregateFunction(max, Float64),
          throttle_reasons SimpleAggregateFunction(groupBitOr, UInt64),
          throttled_samples AggregateFunction(countIf, UInt8),
          ecc_dbe_max SimpleAggregateFunction(max, Int64)
        ) ENGINE = AggregatingMergeTree
        PARTITION BY toYYYYMMDD(minute)
        ORDER BY (host, gpu, minute)
        ${ttlMinute}
        ${DEDUP}`,
        `CREATE MATERIALIZED VIEW IF NOT EXISTS gpu_minute_mv TO gpu_minute AS
        SELECT ${minuteOf} AS minute, e.host AS host, toInt16(e.gpu) AS gpu,
          countState() AS samples,
          avgState(JSONExtractFloat(raw, 'sm_clock_mhz')) AS sm_clock_mhz,
          min(JSONExtractFloat(raw, 'sm_clock_mhz')) AS sm_clock_min_mhz,
          avgState(JSONExtractFloat(raw, 'power_w')) AS power_w,
          max(JSONExtractFloat(raw, 'temp_c')) AS temp_max_c,
          groupBitOr(JSONExtractUInt(raw, 'throttle_reasons')) AS throttle_reasons,
          countIfState(toUInt8(bitAnd(JSONExtractUInt(raw, 'throttle_reasons'), 232) != 0)) AS throttled_samples,
          max(${jInt('ecc_dbe')}) AS ecc_dbe_max
        FROM events AS e WHERE kind = 'gpu' GROUP BY minute, host, gpu`,
        // Faults, checkpoints and job lifecycle, typed out of the raw events (kept longer than raw).
        `CREATE TABLE IF NOT EXISTS faults (
          ts ${TS},
          host LowCardinality(String),
          gpu Int16,
          job LowCardinality(String),
          rank Int32,
          source LowCardinality(String),
          code String,
          message String CODEC(ZSTD(3))
        ) ENGINE = ReplacingMergeTree
        PARTITION BY toYYYYMMDD(ts)
        ORDER BY (host, ts, source, cityHash64(message))
        ${ttlTs}
        ${DEDUP}`,
        `CREATE MATERIALIZED VIEW IF NOT EXISTS faults_mv TO faults AS
        SELECT ts, host, toInt16(e.gpu) AS gpu, job, rank,
          JSONExtractString(raw, 'source') AS source,
          if(JSONHas(raw, 'code'), trim(BOTH '"' FROM JSONExtractRaw(raw, 'code')), '') AS code,
          JSONExtractString(raw, 'message') AS message
        FROM events AS e WHERE kind = 'fault'`,
        `CREATE TABLE IF NOT EXISTS checkpoints (
          ts ${TS},
          job LowCardinality(String),
          rank Int32,
          step Int64,
          phase LowCardinality(String),
          dur_ms Float64 CODEC(Gorilla, ZSTD(1)),
          bytes Float64,
          ok UInt8
        ) ENGINE = ReplacingMergeTree
        PARTITION BY toYYYYMMDD(ts)
        ORDER BY (job, ts, phase, rank, step)
        ${ttlTs}
        ${DEDUP}`,
        `CREATE MATERIALIZED VIEW IF NOT EXISTS checkpoints_mv TO checkpoints AS
        SELECT ts, job, rank, step,
          JSONExtractString(raw, 'phase') AS phase,
          JSONExtractFloat(raw, 'dur_ms') AS dur_ms,
          JSONExtractFloat(raw, 'bytes') AS bytes,
          toUInt8(JSONExtractBool(raw, 'ok')) AS ok
        FROM events WHERE kind = 'checkpoint'`,
        `CREATE TABLE IF NOT EXISTS job_events (
          ts ${TS},
          job LowCardinality(String),
          event LowCardinality(String),
          cause String,
          world_size Int32,
          gpu_model LowCardinality(String)
        ) ENGINE = ReplacingMergeTree
        PARTITION BY toYYYYMMDD(ts)
        ORDER BY (job, ts, event, cause)
        ${ttlTs}
        ${DEDUP}`,
        `CREATE MATERIALIZED VIEW IF NOT EXISTS job_events_mv TO job_events AS
        SELECT ts, job,
          if(kind = 'job', 'config', JSONExtractString(raw, 'event')) AS event,
          JSONExtractString(raw, 'cause') AS cause,
          toInt32(${jInt('world_size')}) AS world_size,
          JSONExtractString(raw, 'gpu_model') AS gpu_model
        FROM events WHERE kind IN ('job', 'job_event')`,
      ];
    },
  },
  {
    version: 3,
    name: 'finding acks and silences, with the token name that made them (the audit of admin actions)',
    statements: () => [
      `CREATE TABLE IF NOT EXISTS finding_acks (
        ts ${TS},
        id String,
        action LowCardinality(String),
        by String,
        until Nullable(DateTime64(3, 'UTC')),
        note String
      ) ENGINE = ReplacingMergeTree
      ORDER BY (id, ts, action, by)`,
    ],
  },
  {
    version: 4,
    name: 'mfu.implausible: why a figure cannot be true (empty when it can)',
    statements: () => [`ALTER TABLE mfu ADD COLUMN IF NOT EXISTS implausible String DEFAULT ''`],
  },
  {
    version: 5,
    name: 'node health transitions and the action audit (cordon automation)',
    statements: () => [
      // One row per transition of a host (gpu -1) or GPU, with why, on what evidence and by whom.
      `CREATE TABLE IF NOT EXISTS node_health (
        ts ${TS},
        host LowCardinality(String),
        gpu Int16,
        from_state LowCardinality(String),
        to_state LowCardinality(String),
        reason String,
        evidence Array(String),
        actor LowCardinality(String),
        needs_human UInt8
      ) ENGINE = ReplacingMergeTree
      PARTITION BY toYYYYMM(ts)
      ORDER BY (host, gpu, ts, to_state)`,
      // Every action and every refusal, with the finding and the actor that caused it.
      `CREATE TABLE IF NOT EXISTS action_audit (
        ts ${TS},
        id String,
        host LowCardinality(String),
        verb LowCardinality(String),
        driver LowCardinality(String),
        outcome LowCardinality(String),
        reason String,
        finding_id String,
        actor LowCardinality(String),
        attempts UInt16
      ) ENGINE = ReplacingMergeTree
      PARTITION BY toYYYYMM(ts)
      ORDER BY (host, ts, id, outcome)`,
    ],
  },
  {
    version: 6,
    name: 'the repair loop’s durable state and its leader lease',
    statements: () => [
      // One snapshot per change of the repair loop's state; the engine keeps the highest version
      // (epoch of the lease that wrote it, then a sequence), so a deposed leader's late write loses.
      `CREATE TABLE IF NOT EXISTS automation_state (
        scope LowCardinality(String),
        version UInt64,
        epoch UInt64,
        seq UInt64,
        owner String,
        at DateTime64(3, 'UTC'),
        state String CODEC(ZSTD(3))
      ) ENGINE = ReplacingMergeTree(version)
      ORDER BY scope`,
      // The leader lease: a 'take' row per epoch (insert deduplication keeps the first taker),
      // 'renew' rows while held, a 'release' row on a clean stop (store/lease.ts).
      `CREATE TABLE IF NOT EXISTS automation_lease (
        scope LowCardinality(String),
        epoch UInt64,
        kind LowCardinality(String),
        owner String,
        at DateTime64(3, 'UTC'),
        expires DateTime64(3, 'UTC')
      ) ENGINE = MergeTree
      ORDER BY (scope, epoch, kind, at)
      TTL toDateTime(at) + INTERVAL 7 DAY
      SETTINGS non_replicated_deduplication_window = 1000`,
    ],
  },
  {
    version: 7,
    name: "slow_gpus: each job's slowest-GPUs ranking (the straggler's chronic question), as the detector hands it out",
    statements: ({ rollupTtlDays }) => [
      // A few rows per job every rankingEvery steps: each GPU's own level against its stage peers
      // and what replacing it would buy the job. The latest ranking of a job is its rows at max(ts).
      `CREATE TABLE IF NOT EXISTS slow_gpus (
        ts ${TS},
        job LowCardinality(String),
        step UInt64,
        rank UInt32,
        host LowCardinality(String),
        gpu Int16,
        stage Int16,
        slowdown_pct Float64,
        cost_pct Float64,
        gpu_hours_per_day Float64,
        steps UInt32
      ) ENGINE = ReplacingMergeTree
      PARTITION BY toYYYYMMDD(ts)
      ORDER BY (job, ts, rank)
      TTL toDateTime(ts) + INTERVAL ${days(rollupTtlDays)} DAY`,
    ],
  },
];

export const MIGRATIONS_TABLE = `CREATE TABLE IF NOT EXISTS schema_migrations (
  version UInt32,
  name String,
  applied_at DateTime64(3, 'UTC')
) ENGINE = ReplacingMergeTree ORDER BY version`;
