/**
 * A sharded job's collectives as its job stage merges them (detectors/job-stage.ts): each shard
 * sends one record per communicator and step for its host groups (shard-reduce.ts); the job stage
 * keeps a step's records until that step's events are released, merges them (minimum of minima)
 * and hands them to the judge oldest step first (`applyThrough`). Later records of a step already
 * judged go at once.
 *
 * A shard sends a communicator's members only when they change and every `MEMBERS_EVERY` steps;
 * each group's list is kept per communicator and the groups' lists are joined once, not every
 * step. A communicator's step with a record whose group's list is not known here (the job stage
 * started after that group last sent it) is not judged: judged with part of its members, its
 * shortest time could be a slower member's and a rail could be blamed for another's link.
 */
import {
  MEMBERS_EVERY,
  type Member,
  mergeReduced,
  type ReducedCollective,
  type ReducedEdges,
  reducedKey,
  type ShardReduced,
} from './shard-reduce.js';

/**
 * A step's merged record of a collective, or the groups' p2p records as each sent them (the judge
 * keeps each edge's shortest time itself, so they are not merged here: a merge copied every edge
 * of the step, and indexed it, only to be taken apart again).
 */
type Pending = ReducedCollective | ReducedEdges[];

export interface MergeHooks {
  /** Records (or events) pushed live, as against replayed: a merge of a live part is live too. */
  live: WeakSet<object>;
  /** A step's merged record (or its p2p records) to the judge; `live`: its output must come out. */
  judge(r: ShardReduced | ReducedEdges[], live: boolean): void;
  /** A communicator's step not judged: some group's member list is not known here. */
  unknown(): void;
}

export class MergedCollectives {
  /** Steps whose collectives went to the judge already: later records of them go at once. */
  private appliedThrough = Number.NEGATIVE_INFINITY;
  /** Merged records by step, then by communicator, until their step's events are released. */
  private readonly pending = new Map<number, Map<string, Pending>>();
  /** Per communicator (`op|comm`), each group's member list as it last sent it, and the step it came with. */
  private readonly members = new Map<string, Map<number, { list: Member[]; step: number }>>();
  /** Per communicator, the groups' lists last joined and their join (reused while they are the same). */
  private readonly unions = new Map<string, { parts: Map<number, Member[]>; members: Member[] }>();
  /** Collective records copied here (merged into), as against those kept as they came. */
  private readonly copies = new WeakSet<ReducedCollective>();
  /** A pending collective's member list per group; null: some group's list is not known here. */
  private readonly parts = new WeakMap<ReducedCollective, Map<number, Member[]> | null>();

  constructor(private readonly hooks: MergeHooks) {}

  /** A shard's record of a collective's step (`live`: pushed live, not replayed). */
  add(r: ReducedCollective | ReducedEdges, live: boolean): void {
    const { judge, unknown } = this.hooks;
    const list = r.t === 'reduced' ? this.membersOf(r) : undefined;
    if (r.step <= this.appliedThrough) {
      if (r.t === 'edges') judge(r, live);
      else if (list) judge({ ...r, members: list }, live);
      else unknown();
      return;
    }
    let byKey = this.pending.get(r.step);
    if (!byKey) {
      byKey = new Map();
      this.pending.set(r.step, byKey);
    }
    const key = reducedKey(r);
    const have = byKey.get(key);
    if (r.t === 'edges') {
      if (Array.isArray(have)) have.push(r);
      else byKey.set(key, [r]);
      if (live) this.hooks.live.add(r);
      return;
    }
    // The first record is kept as it came; a copy is made only when a second one joins it.
    if (!have) {
      byKey.set(key, r);
      this.parts.set(r, list ? new Map([[r.group, list]]) : null);
    } else if (!Array.isArray(have)) {
      const into = this.own(byKey, key, have);
      mergeReduced(into, r);
      const parts = this.parts.get(into);
      const had = parts?.get(r.group);
      // A group's step sent in two parts (an idle flush came before its last reports): both lists.
      if (!list) this.parts.set(into, null);
      else parts?.set(r.group, had && had !== list ? joined([had, list]) : list);
    }
    // A step's record is live if any part of it is (a copy made by the join carries it on).
    if (live || (have && this.hooks.live.has(have))) this.hooks.live.add(byKey.get(key) as ReducedCollective);
  }

  /** The merged collectives of every step up to `step` go to the judge, oldest first. */
  applyThrough(step: number): void {
    if (step <= this.appliedThrough) return;
    const { judge, unknown, live } = this.hooks;
    const steps = [...this.pending.keys()].filter((k) => k <= step).sort((a, b) => a - b);
    for (const k of steps) {
      for (const [key, r] of this.pending.get(k)!) {
        if (Array.isArray(r))
          judge(
            r,
            r.some((x) => live.has(x)),
          );
        else {
          const parts = this.parts.get(r);
          if (!parts) unknown();
          else {
            r.members = this.union(key, parts);
            judge(r, live.has(r));
          }
        }
      }
      this.pending.delete(k);
      this.forgetGone(k);
    }
    if (step !== Number.POSITIVE_INFINITY) this.appliedThrough = step;
  }

  /**
   * A record's member list: the one it brings (kept as its group's, the same array as before if
   * unchanged, so the join of the groups' lists is reused), or its group's last; undefined if unknown.
   */
  private membersOf(r: ReducedCollective): Member[] | undefined {
    const key = reducedKey(r);
    let byGroup = this.members.get(key);
    const last = byGroup?.get(r.group);
    if (!r.members) return last?.list;
    if (!byGroup) {
      byGroup = new Map();
      this.members.set(key, byGroup);
    }
    const list = last && sameList(last.list, r.members) ? last.list : r.members;
    byGroup.set(r.group, { list, step: r.step });
    return list;
  }

  /** A record of `byKey` this merge may change: the one that came, copied on its first join. */
  private own(byKey: Map<string, Pending>, key: string, have: ReducedCollective): ReducedCollective {
    if (this.copies.has(have)) return have;
    const copy = { ...have };
    this.copies.add(copy);
    this.parts.set(copy, this.parts.get(have) ?? null);
    byKey.set(key, copy);
    return copy;
  }

  /** The join of a collective's groups' member lists: the last one again while the lists are the same. */
  private union(key: string, parts: Map<number, Member[]>): Member[] {
    if (parts.size === 1) return parts.values().next().value!;
    const last = this.unions.get(key);
    if (last && last.parts.size === parts.size) {
      let same = true;
      for (const [g, list] of parts) if (last.parts.get(g) !== list) same = false;
      if (same) return last.members;
    }
    const members = joined(parts.values());
    this.unions.set(key, { parts, members });
    return members;
  }

  /** Member lists of communicators no group has sent for long (renamed by a restart): not kept. */
  private forgetGone(step: number): void {
    if (step % MEMBERS_EVERY !== 0) return;
    for (const [key, byGroup] of this.members) {
      for (const [g, v] of byGroup) if (v.step < step - 3 * MEMBERS_EVERY) byGroup.delete(g);
      if (byGroup.size === 0) {
        this.members.delete(key);
        this.unions.delete(key);
      }
    }
  }
}

function sameList(a: Member[], b: Member[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++)
    if (a[i][0] !== b[i][0] || a[i][1] !== b[i][1] || a[i][2] !== b[i][2]) return false;
  return true;
}

/** Member lists joined: each rank once, in the order the lists give them. */
function joined(lists: Iterable<Member[]>): Member[] {
  const seen = new Set<number>();
  const members: Member[] = [];
  for (const list of lists)
    for (const m of list)
      if (!seen.has(m[0])) {
        seen.add(m[0]);
        members.push(m);
      }
  return members;
}
