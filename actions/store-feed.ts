/**
 * Feeds the repair loop from the store, for processes that share one (detects of a group, an `up`
 * on a ClickHouse server): each detect sees only its partitions' jobs, so the leader reads every
 * process's findings and `check` events back from the tables they were written to, in event-time
 * order, once each. It reads the last `windowMs` of event time on every poll (findings are few)
 * and remembers what it fed by key, a cursor kept in the loop's stored state, so a new leader
 * neither misses nor repeats what its predecessor fed. Evidence older than the window is what the
 * governor refuses as too old anyway; GPU telemetry counters (the ECC trend) are not read here.
 */
import { createHash } from 'node:crypto';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import type { Store } from '../store/store.js';
import type { Automation } from './automation.js';
import { BREAKER_FINDING } from './visible.js';

const JOB_RELATIVE = new Set(['straggler', 'slow_link', 'nccl_slow_host']);

export interface StoreFeedOptions {
  /** Event time read back on every poll (default 20 min: past the governor's 15 min evidence age). */
  windowMs?: number;
  now?: () => number;
}

interface Cursor {
  /** Keys fed, with their event time (pruned past the window). */
  seen: [string, number][];
}

type Item = { t: number; key: string } & ({ finding: Finding } | { event: RankwatchEvent });

export class StoreFeed {
  private readonly windowMs: number;
  private readonly now: () => number;
  private polls = 0;
  fed = 0;

  constructor(
    private readonly store: Pick<Store, 'query'>,
    private readonly automation: Automation,
    o: StoreFeedOptions = {},
  ) {
    this.windowMs = o.windowMs ?? 20 * 60_000;
    this.now = o.now ?? Date.now;
  }

  /** Reads what is new since the last poll and feeds it; returns how many items were fed. */
  async poll(): Promise<number> {
    const a = this.automation;
    if (!a.active) return 0;
    const since = this.now() - this.windowMs;
    const params = { since };
    const [findings, checks] = await Promise.all([
      this.store.query<{ raw: string; t: number }>(
        `SELECT raw, toUnixTimestamp64Milli(ts) AS t FROM findings
         WHERE ts >= fromUnixTimestamp64Milli({since:Int64}) AND type != '${BREAKER_FINDING}' ORDER BY ts`,
        params,
      ),
      this.store.query<{ raw: string; t: number }>(
        `SELECT raw, toUnixTimestamp64Milli(ts) AS t FROM events
         WHERE kind = 'check' AND ts >= fromUnixTimestamp64Milli({since:Int64}) ORDER BY ts`,
        params,
      ),
    ]);
    const seen = new Map(((a.feedCursor as Cursor | undefined)?.seen ?? []).filter(([, t]) => t >= since));
    const items: Item[] = [];
    for (const r of findings) {
      const f = JSON.parse(r.raw) as Finding;
      const key = `f:${f.id}:${f.state}:${f.ts}`;
      if (!seen.has(key)) items.push({ t: Number(r.t), key, finding: f });
    }
    for (const r of checks) {
      const key = `c:${createHash('sha1').update(r.raw).digest('base64url').slice(0, 16)}`;
      if (!seen.has(key)) items.push({ t: Number(r.t), key, event: JSON.parse(r.raw) as RankwatchEvent });
    }
    items.sort((x, y) => x.t - y.t);
    await this.jobHosts(items);
    if (++this.polls % 30 === 1) await this.fleet();
    // The cursor first: the state written after these decisions already knows they were fed.
    for (const i of items) seen.set(i.key, i.t);
    a.feedCursor = { seen: [...seen] } satisfies Cursor;
    for (const i of items) {
      if ('finding' in i) a.onFindings([i.finding]);
      else a.onEvents([i.event]);
    }
    a.tick(this.now());
    this.fed += items.length;
    return items.length;
  }

  /** Host counts of the jobs whose job-relative findings are about to be fed (from the steps' rollup). */
  private async jobHosts(items: Item[]): Promise<void> {
    const jobs = [
      ...new Set(
        items.flatMap((i) =>
          'finding' in i && i.finding.job && JOB_RELATIVE.has(i.finding.type) ? [i.finding.job] : [],
        ),
      ),
    ];
    if (jobs.length === 0) return;
    const rows = await this.store.query<{ job: string; n: number }>(
      `SELECT job, uniqExact(host) AS n FROM rank_minute
       WHERE job IN {jobs:Array(String)} AND minute >= now() - INTERVAL 1 DAY GROUP BY job`,
      { jobs },
    );
    for (const r of rows) this.automation.noteJobHosts(r.job, Number(r.n));
  }

  /** Hosts seen in the last day, from the step and GPU rollups (the fleet, without a scheduler). */
  private async fleet(): Promise<void> {
    const [r] = await this.store.query<{ n: number }>(
      `SELECT uniqExact(host) AS n FROM (
         SELECT host FROM rank_minute WHERE minute >= now() - INTERVAL 1 DAY
         UNION ALL SELECT host FROM gpu_minute WHERE minute >= now() - INTERVAL 1 DAY)`,
    );
    this.automation.noteFleetSeen(Number(r?.n ?? 0));
  }
}
