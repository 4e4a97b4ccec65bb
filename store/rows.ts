/**
 * Events and detector output as insert payloads handed to the engine's insert path as bytes,
 * never values spliced into SQL (string-built VALUES: an injection risk, and about as fast in
 * chDB when measured, see docs/benchmarks.md). Raw events, the biggest table, travel as
 * TabSeparatedWithNames: the engine parses it faster than JSONEachRow, and each raw event is
 * the line it arrived as, so it is neither serialized again nor escaped twice (~25% less CPU in
 * `detect`, measured). Every other table takes JSONEachRow, one JSON object per line: for typed
 * numeric rows the engine's cost is the same either way and JSON.stringify is the cheaper encoder.
 */

import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import type { DetectorOutput } from '../schema/output.js';

export interface DeadLetter {
  ts: number;
  source: string;
  reason: string;
  raw: string;
  /** Where it was read on the bus, when the bus has positions (Kafka). Not stored in the table. */
  topic?: string;
  partition?: number;
  offset?: number;
  /** The input line, when read from a file. Not stored in the table. */
  line?: number;
}

export interface InsertBatch {
  table: string;
  rows: string[];
  /** TabSeparated rows name their columns here (matched by name, so column order may change). */
  columns?: readonly string[];
  /**
   * Insert deduplication token (ClickHouse `insert_deduplication_token`): rows inserted again under
   * the same token are dropped whole, before any materialized view sees them. Set from where the
   * rows came from on the bus (topic/partition/offset), so the same message counts once however it
   * is batched; unset, the engine hashes the block's content.
   */
  token?: string;
}

/** The body and format a driver sends for one batch. */
export function insertBody(b: InsertBatch): {
  format: 'JSONEachRow' | 'TabSeparatedWithNames';
  body: Buffer;
} {
  if (b.columns)
    return {
      format: 'TabSeparatedWithNames',
      body: Buffer.from(`${b.columns.join('\t')}\n${b.rows.join('\n')}\n`),
    };
  return { format: 'JSONEachRow', body: Buffer.from(`${b.rows.join('\n')}\n`) };
}

const ms = (t: number) => Math.round(t);

const TSV_SPECIAL = /[\\\t\n\r]/;
const TSV_ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' };
/** A string as a TabSeparated field. JSON text rarely holds a backslash or tab, so most pass as they are. */
function tsvField(s: string): string {
  return TSV_SPECIAL.test(s) ? s.replace(/[\\\t\n\r]/g, (c) => TSV_ESCAPES[c]) : s;
}

export const EVENT_COLUMNS = ['ts', 'kind', 'job', 'host', 'gpu', 'rank', 'step', 'raw'] as const;

/** The steps table's rows: one per step event (what heatmaps and job overviews read). */
export function stepRows(events: RankwatchEvent[]): InsertBatch {
  const rows: string[] = [];
  for (const e of events) {
    if (e.kind !== 'step') continue;
    rows.push(
      JSON.stringify({
        ts: ms(e.ts),
        job: e.job,
        step: e.step,
        rank: e.rank,
        host: e.host,
        gpu: e.gpu,
        stage: e.stage ?? 0,
        step_ms: e.step_ms,
        compute_ms: e.compute_ms,
        comm_wait_ms: e.comm_wait_ms ?? null,
        tokens: e.tokens ?? 0,
      }),
    );
  }
  return { table: 'steps', rows };
}

/**
 * The kinds a job sends a handful of, whose views (faults, checkpoints, job lifecycle) the
 * checkpoint advisor, `rankwatch jobs` and the fault panels read: kept even without raw events.
 * Checks too: the repair loop's leader reads them back to verify repaired nodes.
 */
export const SPARSE_KINDS: ReadonlySet<string> = new Set([
  'job',
  'job_event',
  'checkpoint',
  'fault',
  'check',
]);

/**
 * Raw events and step rows. `lines[i]`, when given, is the text `events[i]` was decoded from and
 * is stored as its raw form; without it the event is serialized. With `only`, raw rows are kept
 * for those kinds alone (steps still all go to their table).
 */
export function eventRows(
  events: RankwatchEvent[],
  lines?: readonly (string | undefined)[],
  only?: ReadonlySet<string>,
): InsertBatch[] {
  const raw: string[] = [];
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    if (only && !only.has(e.kind)) continue;
    const a = e as Partial<Record<'job' | 'host', string>> & Partial<Record<'gpu' | 'rank' | 'step', number>>;
    raw.push(
      `${ms(e.ts)}\t${e.kind}\t${tsvField(a.job ?? '')}\t${tsvField(a.host ?? '')}\t${a.gpu ?? -1}\t` +
        `${a.rank ?? -1}\t${a.step ?? -1}\t${tsvField(lines?.[i] ?? JSON.stringify(e))}`,
    );
  }
  return [{ table: 'events', columns: EVENT_COLUMNS, rows: raw }, stepRows(events)];
}

export function findingRow(f: Finding): string {
  return JSON.stringify({
    ts: ms(f.ts),
    id: f.id,
    state: f.state,
    type: f.type,
    job: f.job ?? '',
    host: f.host,
    gpu: f.gpu ?? null,
    rank: f.rank ?? null,
    peer_host: f.peer_host ?? null,
    severity: f.severity,
    onset_ts: f.onset_ts === undefined ? null : ms(f.onset_ts),
    est_cost_pct: f.est_cost_pct ?? null,
    action: f.action,
    summary: f.summary,
    related: f.related ?? [],
    raw: JSON.stringify(f),
  });
}

export function outputRows(out: DetectorOutput): InsertBatch[] {
  return [
    { table: 'findings', rows: out.findings.map(findingRow) },
    { table: 'mfu', rows: out.mfu.map((p) => JSON.stringify({ ...p, ts: ms(p.ts) })) },
    { table: 'step_rollups', rows: out.rollups.map((r) => JSON.stringify({ ...r, ts: ms(r.ts) })) },
    { table: 'slow_gpus', rows: (out.slowGpus ?? []).map((r) => JSON.stringify({ ...r, ts: ms(r.ts) })) },
  ];
}

export function deadLetterRows(rows: DeadLetter[]): InsertBatch[] {
  return [
    {
      table: 'dead_letters',
      rows: rows.map((d) => JSON.stringify({ ts: ms(d.ts), source: d.source, reason: d.reason, raw: d.raw })),
    },
  ];
}
