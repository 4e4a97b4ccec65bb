/**
 * The repair loop's state as stored (migration 6): one JSON snapshot per change, versioned by the
 * lease epoch that wrote it and a sequence within the epoch. The highest version is the state; a
 * deposed leader's writes carry a lower epoch and never win (store/lease.ts).
 */
import type { InsertBatch } from './rows.js';
import type { Store } from './store.js';

export interface StoredState<T> {
  epoch: number;
  seq: number;
  owner: string;
  at: number;
  state: T;
}

/** Sequences within one epoch stay below this, so epoch then seq order as one number. */
const SEQ_SPAN = 2 ** 32;

export function stateRow(scope: string, s: Omit<StoredState<unknown>, 'state'>, state: unknown): InsertBatch {
  return {
    table: 'automation_state',
    rows: [
      JSON.stringify({
        scope,
        version: s.epoch * SEQ_SPAN + s.seq,
        epoch: s.epoch,
        seq: s.seq,
        owner: s.owner,
        at: Math.round(s.at),
        state: JSON.stringify(state),
      }),
    ],
  };
}

/** The latest snapshot of `scope`, or undefined when none was ever written. */
export async function latestState<T>(
  store: Pick<Store, 'query'>,
  scope: string,
): Promise<StoredState<T> | undefined> {
  const [r] = await store.query<{ epoch: number; seq: number; owner: string; at: number; state: string }>(
    `SELECT epoch, seq, owner, toUnixTimestamp64Milli(at) AS at, state
     FROM automation_state WHERE scope = {scope:String} ORDER BY version DESC LIMIT 1`,
    { scope },
  );
  if (!r) return undefined;
  return {
    epoch: Number(r.epoch),
    seq: Number(r.seq),
    owner: String(r.owner),
    at: Number(r.at),
    state: JSON.parse(r.state) as T,
  };
}

/** The highest epoch any snapshot of `scope` was written under (0: none). */
export async function latestStateEpoch(store: Pick<Store, 'query'>, scope: string): Promise<number> {
  const [r] = await store.query<{ e: number }>(
    'SELECT max(epoch) AS e FROM automation_state WHERE scope = {scope:String}',
    { scope },
  );
  return Number(r?.e ?? 0);
}
