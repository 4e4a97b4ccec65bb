/**
 * The live signs of a hung rank in a stalled job, each a set of suspects (empty when the sign says
 * nothing, e.g. when it points at most of the job: a job-wide pause, not one rank):
 * - its GPU went idle when the job stopped while its peers' GPUs stay busy (NCCL kernels spin
 *   while they wait for it);
 * - its reports stopped first (its last step or collective well before the job's last);
 * - its sequence number is behind its communicator peers' for some operation.
 * Each pass is O(ranks) and runs only while a job is stalled without a named culprit.
 */
import { BUSY, EMPTY_SLOT, IDLE, type JobProgress, SLOTS } from './progress.js';

export interface IdleSign {
  ranks: number[];
  /** GPUs that were sampled but fell silent (a host that went down, a GPU off the bus). */
  silent: number[];
  sampled: number;
  busy: number;
}

export interface BehindIn {
  comm: string;
  op: string;
  seq: number;
  peers_seq: number;
}

/** The most suspects a sign may name and still single out a few ranks. */
export function suspectLimit(ranks: number, maxSuspects: number): number {
  return Math.max(maxSuspects, Math.ceil(ranks / 100));
}

/**
 * GPUs idle for most of the stall (since two sample gaps after it began, or its first half: a hung
 * rank's GPU may drain queued work for a few seconds) and still idle at their latest recent sample,
 * while at least half of the job's recently sampled GPUs are busy.
 */
export function idleWhilePeersBusy(p: JobProgress, now: number, stallTs: number, limit: number): IdleSign {
  const gap = Math.max(p.sampleGapMs, 1_000);
  const recent = now - Math.max(3 * gap, 5_000);
  const idleBy = Math.max(stallTs + 2 * gap, stallTs + (now - stallTs) / 2);
  let sampled = 0;
  let busy = 0;
  const ranks: number[] = [];
  const silent: number[] = [];
  for (let r = 0; r < p.size; r++) {
    if (p.gpuTs[r] === 0) continue;
    if (p.gpuTs[r] < recent) {
      // Silent since the job stopped, not long before it (a GPU whose samples never came back).
      if (p.gpuTs[r] >= stallTs - 2 * gap && silent.length <= limit) silent.push(r);
      continue;
    }
    sampled++;
    const s = p.gpuState[r];
    if (s === BUSY) busy++;
    else if (s === IDLE && p.idleSince[r] <= idleBy && ranks.length <= limit) ranks.push(r);
  }
  const peersBusy = busy >= sampled / 2 && sampled > 0;
  return {
    ranks: peersBusy && ranks.length <= limit ? ranks : [],
    silent: peersBusy && silent.length <= limit ? silent : [],
    sampled,
    busy,
  };
}

/** Ranks whose last report came at least half a step (≥ 0.5 s) before the job's last one. */
export function stoppedFirst(p: JobProgress): number[] {
  const gap = Math.max(0.5 * p.typicalMs, 500);
  const cut = p.maxTs - gap;
  let active = 0;
  const early: number[] = [];
  for (let r = 0; r < p.size; r++) {
    const t = p.lastTs[r];
    if (t === 0) continue;
    active++;
    if (t < cut) early.push(r);
  }
  return early.length > 0 && early.length <= active / 4 ? early : [];
}

/** Ranks behind their peers on some collective (sequence numbers), with where. */
export function behindPeers(p: JobProgress): Map<number, BehindIn[]> {
  const behind = new Map<number, BehindIn[]>();
  let active = 0;
  for (let r = 0; r < p.size; r++) {
    if (p.lastTs[r] > 0) active++;
    for (let k = r * SLOTS; k < (r + 1) * SLOTS && k < p.slotOp.length; k++) {
      const id = p.slotOp[k];
      if (id === EMPTY_SLOT) break;
      if (p.opMembers[id] < 2 || p.slotSeq[k] >= p.opMax[id]) continue;
      const list = behind.get(r) ?? [];
      list.push({ comm: p.opComm[id], op: p.opName[id], seq: p.slotSeq[k], peers_seq: p.opMax[id] });
      behind.set(r, list);
    }
  }
  return behind.size <= Math.max(1, active / 4) ? behind : new Map();
}

/**
 * The rank's collectives where no member got past it: the next operation there is the one its
 * peers wait in (`next_seq`). Where it is behind, its peers already moved on.
 */
export function stuckIn(p: JobProgress, rank: number): { comm: string; op: string; next_seq: number }[] {
  const out: { comm: string; op: string; next_seq: number }[] = [];
  for (let k = rank * SLOTS; k < (rank + 1) * SLOTS && k < p.slotOp.length; k++) {
    const id = p.slotOp[k];
    if (id === EMPTY_SLOT) break;
    if (p.opMembers[id] < 2 || p.slotSeq[k] < p.opMax[id]) continue;
    out.push({ comm: p.opComm[id], op: p.opName[id], next_seq: p.opMax[id] + 1 });
  }
  return out;
}
