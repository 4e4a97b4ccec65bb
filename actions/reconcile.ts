/**
 * What the repair loop's stored state and the scheduler's own list disagree on at start, and
 * what to do about it. Pure: the scheduler's word wins about who has a node out.
 * - adopt: out with rankwatch's mark, unknown to the state (drained just before a crash, its
 *   state write lost): rankwatch's, counted, cordoned so it can be repaired and resumed;
 * - release: the state has it out by rankwatch, the scheduler does not (resumed outside
 *   rankwatch, held by a person now, or gone from the list): theirs now;
 * - interrupted: a drain the governor had counted that the scheduler never did.
 */
import type { ListedNode } from './drivers/driver.js';

export interface ReconcilePlan {
  adopt: { host: string; why: string }[];
  release: { host: string; why: string }[];
  interrupted: string[];
}

export function reconcilePlan(
  nodes: readonly ListedNode[],
  state: {
    /** Out by rankwatch's hand, as stored. */
    out: ReadonlySet<string>;
    /** Counted against the budget by the governor. */
    counted: readonly string[];
    /** Out on paper (dry-run) or waiting for approval: not the scheduler's business. */
    notInScheduler: ReadonlySet<string>;
  },
  driver: string,
): ReconcilePlan {
  const listed = new Map(nodes.map((n) => [n.host, n]));
  const adopt = nodes
    .filter((n) => n.byRankwatch && !state.out.has(n.host))
    .map((n) => ({
      host: n.host,
      why: `found out by rankwatch in ${driver} at start (${n.reason ?? 'no reason'})`,
    }));
  const release = [...state.out]
    .filter((h) => !listed.get(h)?.byRankwatch)
    .map((host) => {
      const n = listed.get(host);
      const why = !n
        ? `not in ${driver}'s node list any more`
        : n.out
          ? `a person holds it out now (${n.reason ?? 'no reason'}): left to them`
          : `back in service in ${driver} (resumed outside rankwatch)`;
      return { host, why };
    });
  const adopted = new Set(adopt.map((a) => a.host));
  const interrupted = state.counted.filter(
    (h) => !state.out.has(h) && !adopted.has(h) && !state.notInScheduler.has(h),
  );
  return { adopt, release, interrupted };
}
