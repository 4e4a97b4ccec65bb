import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { NodeHealth } from '../detectors/health/health.js';
import { ChdbStore } from '../store/chdb.js';
import { SCHEMA_OBJECTS } from '../store/schema.js';
import { auditRows, transitionRows } from './journal.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-journal-'));
const store = new ChdbStore({ path: dir });
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

it('transitions and audit rows land in the tables of migration 3 (real chDB)', async () => {
  for (const t of SCHEMA_OBJECTS) await store.exec(`DROP TABLE IF EXISTS ${t}`);
  await store.migrate();
  const h = new NodeHealth();
  const moves = h.onFinding({
    id: 'xid-1',
    ts: 1_764_000_000_000,
    type: 'xid',
    state: 'open',
    host: 'gpu-0007',
    gpu: 2,
    severity: 'critical',
    evidence: {},
    action: 'drain',
    summary: 'XID 79',
  });
  await store.insert([
    transitionRows(moves),
    auditRows([
      {
        ts: 1_764_000_000_500,
        id: 'a-1',
        host: 'gpu-0007',
        verb: 'cordon',
        driver: 'slurm',
        outcome: 'refused',
        reason: 'fleet budget: 4 of 64 nodes out',
        finding_id: 'xid-1',
        actor: 'rankwatch',
        attempts: 0,
      },
    ]),
  ]);
  const rows = await store.query<{ gpu: number; to_state: string; evidence: string[] }>(
    'SELECT gpu, to_state, evidence FROM node_health FINAL ORDER BY gpu, ts, to_state',
  );
  expect(rows.map((r) => [Number(r.gpu), r.to_state])).toEqual([
    [-1, 'cordoned'],
    [-1, 'suspect'],
    [2, 'cordoned'],
    [2, 'suspect'],
  ]);
  expect(rows[0].evidence).toEqual(['xid-1']);
  const audit = await store.query<{ outcome: string; actor: string; finding_id: string }>(
    'SELECT outcome, actor, finding_id FROM action_audit FINAL',
  );
  expect(audit).toEqual([{ outcome: 'refused', actor: 'rankwatch', finding_id: 'xid-1' }]);
});
