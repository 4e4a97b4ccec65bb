/**
 * The end of a soak run: what the store holds, compared line by line with what was fed. Produced =
 * stored once + set aside with a reason, in the raw tables and in every rollup; the findings equal
 * those of `rankwatch replay` over the same valid input.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createClient } from '@clickhouse/client';
import type { CollectorDrops } from './collector.js';
import type { SoakInput } from './input.js';
import { Proc } from './procs.js';

export interface Accounting {
  path: string;
  fed: number;
  valid: number;
  /** Lines refused at ingest with a reason (the sender was told). */
  refusedAtIngest: number;
  /** Oversized events the collector set aside because the bus refuses them. */
  refusedOversized: number;
  /** Events the collector dropped for any other reason (a full buffer, a stopped publisher): loss. */
  droppedOther: Record<string, number>;
  /** Expected in the store: valid events plus the oversized ones that were not set aside. */
  expected: Record<string, number>;
  stored: Record<string, number>;
  deadLetters: Record<string, number>;
  rollups: { name: string; expected: number; got: number }[];
  lost: number;
  doubled: number;
  findings: { replay: number; stored: number; missing: string[]; extra: string[] };
  faults: string[];
  ok: boolean;
}

const q = async <T>(c: ReturnType<typeof createClient>, query: string): Promise<T[]> =>
  (await (await c.query({ query, format: 'JSONEachRow' })).json()) as T[];

/** Finding events as `id|state|ts`, the form both sides are compared in. */
const key = (f: { id: string; state: string; ts: number | string }) =>
  `${f.id}|${f.state}|${Math.round(Number(f.ts))}`;

/**
 * Incidents by id alone: what the sharded layout is held to (the same incidents as replay; a GPU
 * finding's later cost updates come from the shard that owns the GPU, not the job stage).
 */
export const incidentsOnly = (keys: string[]) => [...new Set(keys.map((k) => k.split('|')[0]))].sort();

export async function replayFindings(input: SoakInput, extra: string[], dir: string): Promise<string[]> {
  const file = join(dir, `${input.job}.valid.jsonl`);
  const out = join(dir, `${input.job}.replay-findings.jsonl`);
  writeFileSync(file, `${[...input.valid, ...extra].join('\n')}\n`);
  const p = Proc.cli('replay', ['replay', file, '--findings', out, '--quiet']);
  const code = await new Promise((r) => p.child.once('exit', r));
  if (code !== 0) throw new Error(`soak: replay failed (${code}): ${p.log()}`);
  return readFileSync(out, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => key(JSON.parse(l)))
    .sort();
}

export async function account(o: {
  path: string;
  url: string;
  input: SoakInput;
  refusedAtIngest: number;
  drops: CollectorDrops;
  replay: string[];
  faults: string[];
  /** How findings are compared (default: every finding event). */
  findingKeys?: (keys: string[]) => string[];
}): Promise<Accounting> {
  const c = createClient({ url: o.url, request_timeout: 120_000 });
  try {
    const stored: Record<string, number> = {};
    for (const r of await q<{ kind: string; n: string }>(
      c,
      'SELECT kind, uniqExact(cityHash64(raw)) AS n FROM events GROUP BY kind',
    ))
      stored[r.kind] = Number(r.n);
    const expected = { ...o.input.byKind };
    const refusedOversized = o.drops.refusedByBus;
    const oversizedStored = o.input.oversized - refusedOversized;
    expected.gpu = (expected.gpu ?? 0) + oversizedStored;
    const deadLetters: Record<string, number> = {};
    for (const r of await q<{ reason: string; n: string }>(
      c,
      'SELECT reason, count() AS n FROM dead_letters FINAL GROUP BY reason',
    ))
      deadLetters[r.reason.slice(0, 120)] = Number(r.n);
    const one = async (sql: string) => Number((await q<{ n: string }>(c, sql))[0]?.n ?? 0);
    const steps = expected.step ?? 0;
    const rollups = [
      { name: 'steps (raw, FINAL)', expected: steps, got: await one('SELECT count() AS n FROM steps FINAL') },
      {
        name: 'job_minute rows',
        expected: steps,
        got: await one(
          'SELECT sum(c) AS n FROM (SELECT countMerge(rows) AS c FROM job_minute GROUP BY job, minute)',
        ),
      },
      {
        name: 'rank_minute steps',
        expected: steps,
        got: await one(
          'SELECT sum(c) AS n FROM (SELECT countMerge(steps) AS c FROM rank_minute GROUP BY job, minute, rank)',
        ),
      },
      {
        name: 'gpu_minute samples',
        expected: expected.gpu ?? 0,
        got: await one(
          'SELECT sum(c) AS n FROM (SELECT countMerge(samples) AS c FROM gpu_minute GROUP BY host, gpu, minute)',
        ),
      },
    ];
    const compare = o.findingKeys ?? ((k: string[]) => k);
    const storedFindings = compare(
      (
        await q<{ id: string; state: string; ts: string }>(
          c,
          'SELECT id, state, toUnixTimestamp64Milli(ts) AS ts FROM findings FINAL',
        )
      )
        .map(key)
        .sort(),
    );
    const replayed = compare(o.replay);
    let lost = 0;
    let doubled = 0;
    for (const [kind, n] of Object.entries(expected)) {
      const got = stored[kind] ?? 0;
      if (got < n) lost += n - got;
      if (got > n) doubled += got - n;
    }
    for (const r of rollups) {
      if (r.got < r.expected) lost += r.expected - r.got;
      if (r.got > r.expected) doubled += r.got - r.expected;
    }
    const replaySet = new Set(replayed);
    const storedSet = new Set(storedFindings);
    const missing = replayed.filter((k) => !storedSet.has(k));
    const extra = storedFindings.filter((k) => !replaySet.has(k));
    return {
      path: o.path,
      fed: o.input.fed.length,
      valid: o.input.valid.length,
      refusedAtIngest: o.refusedAtIngest,
      refusedOversized,
      droppedOther: o.drops.other,
      expected,
      stored,
      deadLetters,
      rollups,
      lost,
      doubled,
      findings: { replay: replayed.length, stored: storedFindings.length, missing, extra },
      faults: o.faults,
      ok:
        lost === 0 &&
        doubled === 0 &&
        missing.length === 0 &&
        extra.length === 0 &&
        o.refusedAtIngest === o.input.corrupt &&
        Object.keys(o.drops.other).length === 0 &&
        // More refusals than oversized events: the collector miscounts, or refused a valid one.
        refusedOversized <= o.input.oversized,
    };
  } finally {
    await c.close();
  }
}
