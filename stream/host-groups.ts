/**
 * The sharded layout's keys (docs/operations.md, "Capacity"): every event of a job is keyed
 * `JOB/hostgroup-N`, a fixed range of host indexes per group (an event of no rank: group 0), so
 * each group's partition goes to a shard `detect`, which passes what is not its own (steps, job
 * events, checkpoints, faults) on to the job stage in the order it read them
 * (detectors/shard-forward.ts); the `job` event goes under the job's key, for its job stage, and
 * under every group's. A host's index is its ranks' (rank / GPUs per host, Megatron order), so
 * every node's collector computes the same group without a list of the job's hosts.
 *
 * Unsharded keying (`keyOf`) stays the default: a job of a few thousand GPUs fits one process.
 */
import type { Batch } from './transport.js';
import { keyOf } from './transport.js';

/** Hosts per group unless set: 4,096 GPUs of 8-GPU hosts, so a 100k-GPU job has 25 groups to spread. */
export const DEFAULT_GROUP_HOSTS = 512;
export const DEFAULT_GPUS_PER_HOST = 8;

const SHARD_KEY = /\/hostgroup-(\d+)$/;

/** Whether a bus key names a host group (goes to the shard stage). */
export function isShardKey(key: string): boolean {
  return SHARD_KEY.test(key);
}

/** The job and group of a shard key; undefined for other keys. */
export function parseShardKey(key: string): { job: string; group: number } | undefined {
  const m = SHARD_KEY.exec(key);
  return m ? { job: key.slice(0, m.index), group: Number(m[1]) } : undefined;
}

export interface HostGroupConfig {
  /** Hosts per group (default DEFAULT_GROUP_HOSTS). */
  groupHosts?: number;
}

/** GPUs per host of a job: from its `job` event when it lists its hosts, else 8. */
export function gpusPerHost(job: { world_size?: number; hosts?: unknown } | undefined): number {
  const hosts = Array.isArray(job?.hosts) ? job.hosts.length : 0;
  const world = job?.world_size ?? 0;
  return hosts > 0 && world >= hosts ? Math.ceil(world / hosts) : DEFAULT_GPUS_PER_HOST;
}

/** The group of a rank. */
export function groupOfRank(rank: number, perHost: number, groupHosts: number): number {
  return Math.floor(Math.floor(rank / perHost) / groupHosts);
}

/** How many groups a job of `worldSize` ranks has. */
export function groupCount(worldSize: number, perHost: number, groupHosts: number): number {
  return Math.max(1, Math.ceil(worldSize / perHost / groupHosts));
}

/**
 * Keys events for the sharded layout. Stateful only in what it learns from `job` events (GPUs
 * per host); a `job` event is also copied into each of its groups' keys, so a shard knows the
 * job's GPU model (throttle's max clock) without reading the job stage's partition.
 */
export class HostGroupKeys {
  readonly groupHosts: number;
  private readonly perHost = new Map<string, number>();

  constructor(cfg: HostGroupConfig = {}) {
    this.groupHosts = cfg.groupHosts ?? DEFAULT_GROUP_HOSTS;
  }

  /** The keys an event goes under: one, or a job event's job key and every group key of the job. */
  keysOf(event: unknown): string[] {
    const e = event as { kind?: unknown; job?: unknown; rank?: unknown; world_size?: unknown };
    const job = typeof e.job === 'string' && e.job ? e.job : undefined;
    if (!job || typeof e.kind !== 'string') return [keyOf(event)];
    if (e.kind !== 'job' && typeof e.rank === 'number' && e.rank >= 0)
      return [
        `${job}/hostgroup-${groupOfRank(e.rank, this.perHost.get(job) ?? DEFAULT_GPUS_PER_HOST, this.groupHosts)}`,
      ];
    // Of no rank (a restart, a checkpoint, a fault of the host): with the first group's, in order
    // with the steps its shard passes on (detectors/shard-forward.ts).
    if (e.kind !== 'job') return [`${job}/hostgroup-0`];
    if (typeof e.world_size === 'number') {
      const per = gpusPerHost(event as { world_size: number; hosts?: unknown });
      this.perHost.set(job, per);
      const n = groupCount(e.world_size, per, this.groupHosts);
      // The job stage waits for every group's reductions of a step before it judges the step.
      (event as { host_groups?: number }).host_groups = n;
      // A shard reads many groups in one delivery: it finds each record's group from its rank.
      (event as { host_group_size?: number }).host_group_size = this.groupHosts;
      return [job, ...Array.from({ length: n }, (_, g) => `${job}/hostgroup-${g}`)];
    }
    return [keyOf(event)];
  }

  /** Like batchByKey: one batch per key, order kept within each key. */
  batch(events: unknown[], maxEvents = Number.POSITIVE_INFINITY): Batch[] {
    const byKey = new Map<string, Batch>();
    const out: Batch[] = [];
    for (const e of events) {
      for (const k of this.keysOf(e)) {
        let b = byKey.get(k);
        if (!b || b.events.length >= maxEvents) {
          b = { key: k, events: [] };
          byKey.set(k, b);
          out.push(b);
        }
        b.events.push(e);
      }
    }
    return out;
  }
}
