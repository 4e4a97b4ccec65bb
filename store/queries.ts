/** The reads people run, shared by every driver; every outside value is a bound parameter. */
import type { Finding } from '../schema/finding.js';
import type { Store } from './store.js';

export async function findingsOf(store: Store, job?: string): Promise<Finding[]> {
  const rows = await store.query<{ raw: string }>(
    `SELECT raw FROM findings FINAL ${job === undefined ? '' : 'WHERE job = {job:String}'} ORDER BY ts, id, state`,
    job === undefined ? {} : { job },
  );
  return rows.map((r) => JSON.parse(r.raw) as Finding);
}

export async function mfuOf(store: Store, job: string): Promise<{ step: number; mfu: number; ts: string }[]> {
  return store.query('SELECT step, mfu, ts FROM mfu FINAL WHERE job = {job:String} ORDER BY step', { job });
}

export async function tableCounts(store: Store): Promise<Record<string, number>> {
  const tables = ['events', 'steps', 'mfu', 'step_rollups', 'findings', 'dead_letters'];
  const out: Record<string, number> = {};
  for (const t of tables) {
    const [row] = await store.query<{ n: string }>(`SELECT count() AS n FROM ${t} FINAL`);
    out[t] = Number(row?.n ?? 0);
  }
  return out;
}
