import { describe, expect, it } from 'vitest';
import { groupCount, HostGroupKeys, isShardKey, parseShardKey } from './host-groups.js';

const job = {
  v: 1,
  kind: 'job',
  ts: 0,
  job: 'j',
  world_size: 64,
  hosts: Array.from({ length: 8 }, (_, i) => `h${i}`),
};
const gpu = (rank: number) => ({
  v: 1,
  kind: 'gpu',
  ts: 1,
  job: 'j',
  rank,
  host: `h${rank >> 3}`,
  gpu: rank % 8,
});
const coll = (rank: number) => ({
  v: 1,
  kind: 'collective',
  ts: 1,
  job: 'j',
  rank,
  host: `h${rank >> 3}`,
  step: 0,
});

describe('host-group keys (the sharded layout)', () => {
  it("keys a job's events by a fixed range of hosts, by rank; those of no rank with the first group", () => {
    const k = new HostGroupKeys({ groupHosts: 2 });
    k.keysOf(job);
    // 8 GPUs a host, 2 hosts a group: ranks 0-15 in group 0, 16-31 in group 1.
    expect(k.keysOf(gpu(15))).toEqual(['j/hostgroup-0']);
    expect(k.keysOf(coll(16))).toEqual(['j/hostgroup-1']);
    expect(k.keysOf(coll(63))).toEqual(['j/hostgroup-3']);
    for (const kind of ['step', 'checkpoint', 'fault', 'job_event'])
      expect(k.keysOf({ v: 1, kind, ts: 1, job: 'j', rank: 40, host: 'h5' })).toEqual(['j/hostgroup-2']);
    // A restart, a host's fault of no rank: in order with group 0's steps, through its shard.
    expect(k.keysOf({ v: 1, kind: 'job_event', ts: 1, job: 'j', event: 'restart' })).toEqual([
      'j/hostgroup-0',
    ]);
    expect(k.keysOf({ v: 1, kind: 'fault', ts: 1, job: 'j', host: 'h5', source: 'xid' })).toEqual([
      'j/hostgroup-0',
    ]);
  });

  it("copies the job event into every group, stamped with the job's group count and size", () => {
    const k = new HostGroupKeys({ groupHosts: 3 });
    const e = structuredClone(job);
    expect(k.keysOf(e)).toEqual(['j', 'j/hostgroup-0', 'j/hostgroup-1', 'j/hostgroup-2']);
    expect(e).toMatchObject({ host_groups: 3, host_group_size: 3 });
    expect(groupCount(64, 8, 3)).toBe(3);
  });

  it('leaves what names no job keyed as before (by host); of a job but no rank: the first group', () => {
    const k = new HostGroupKeys({ groupHosts: 1 });
    expect(k.keysOf({ v: 1, kind: 'gpu', ts: 1, host: 'h1', gpu: 0 })).toEqual(['host:h1']);
    expect(k.keysOf({ v: 1, kind: 'fault', ts: 1, host: 'h1', source: 'xid' })).toEqual(['host:h1']);
    expect(k.keysOf({ v: 1, kind: 'gpu', ts: 1, job: 'j', host: 'h1', gpu: 0 })).toEqual(['j/hostgroup-0']);
    expect(k.keysOf({ v: 1, kind: 'collective', ts: 1, job: 'j', rank: -1, host: 'h1' })).toEqual([
      'j/hostgroup-0',
    ]);
  });

  it('batches by key in order, and tells shard keys from job keys', () => {
    const k = new HostGroupKeys({ groupHosts: 4 });
    const batches = k.batch([job, gpu(0), coll(40), gpu(1)]);
    expect(batches.map((b) => [b.key, b.events.length])).toEqual([
      ['j', 1],
      ['j/hostgroup-0', 3],
      ['j/hostgroup-1', 2],
    ]);
    expect(isShardKey('j/hostgroup-12')).toBe(true);
    expect(parseShardKey('a/b/hostgroup-12')).toEqual({ job: 'a/b', group: 12 });
    expect(isShardKey('j')).toBe(false);
    expect(isShardKey('host:h1')).toBe(false);
    expect(parseShardKey('j/hostgroup-x')).toBeUndefined();
  });
});
