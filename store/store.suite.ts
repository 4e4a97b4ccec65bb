/**
 * The conformance suite every store driver passes (chDB here; the server driver in its own test).
 * `make` returns a migrated, empty store.
 */
import { describe, expect, it } from 'vitest';
import { DetectorRunner } from '../detectors/runner.js';
import type { RankwatchEvent } from '../schema/events.js';
import type { Finding } from '../schema/finding.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { findingsOf, tableCounts } from './queries.js';
import { eventRows, outputRows } from './rows.js';
import type { Store } from './store.js';

export function storeSuite(name: string, make: () => Promise<Store>): void {
  describe(`store conformance: ${name}`, () => {
    it('applies migrations idempotently', async () => {
      const s = await make();
      const before = await s.query<{ name: string }>(
        'SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name',
      );
      await s.migrate();
      await s.migrate();
      const after = await s.query<{ name: string }>(
        'SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name',
      );
      expect(after).toEqual(before);
      const versions = await s.query('SELECT version FROM schema_migrations FINAL');
      expect(versions.length).toBe(1);
      const ddl = await s.query<{ q: string }>(
        "SELECT create_table_query AS q FROM system.tables WHERE database = currentDatabase() AND name = 'events'",
      );
      expect(ddl[0].q).toMatch(/TTL/);
    });

    it('keeps one copy of a batch inserted twice (events, steps, findings, mfu)', async () => {
      const s = await make();
      const sim = new ClusterSim({
        ranks: 16,
        steps: 30,
        startTs: Date.now() - 3_600_000,
        faults: [parseFault('slow_rank:rank=3,at=5,slowdown=0.5')],
      });
      const events = [...sim.events()] as RankwatchEvent[];
      const runner = new DetectorRunner();
      for (const e of events) runner.push(e);
      runner.flush();
      const out = runner.take();
      expect(out.findings.length).toBeGreaterThan(0);
      const batches = [...eventRows(events), ...outputRows(out)];
      await s.insert(batches);
      await s.insert(batches);
      const counts = await tableCounts(s);
      expect(counts.events).toBe(events.length);
      expect(counts.steps).toBe(events.filter((e) => e.kind === 'step').length);
      expect(counts.findings).toBe(out.findings.length);
      expect(counts.mfu).toBe(out.mfu.length);
      const stored = await findingsOf(s, sim.opts.job);
      expect(stored.map((f) => f.id).sort()).toEqual(out.findings.map((f) => f.id).sort());
    });

    it('round-trips quotes, backslashes and SQL keywords without injection', async () => {
      const s = await make();
      const nasty = `x'); DROP TABLE findings; -- \\ "quoted" \n line`;
      const f: Finding = {
        id: 'straggler-test',
        ts: Date.now(),
        type: 'straggler',
        state: 'open',
        job: nasty,
        host: nasty,
        severity: 'warning',
        evidence: { note: nasty },
        action: 'watch',
        summary: nasty,
      };
      await s.insert(outputRows({ findings: [f], mfu: [], rollups: [] }));
      const back = await findingsOf(s, nasty);
      expect(back).toHaveLength(1);
      expect(back[0].summary).toBe(nasty);
      expect(back[0].evidence.note).toBe(nasty);
      expect(await findingsOf(s, "' OR 1=1 --")).toEqual([]);
    });
  });
}
