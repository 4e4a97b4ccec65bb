/**
 * Collective names as the field's tools spell them (PyTorch profiling names "nccl:all_reduce",
 * "gloo:_allgather_base", watchdog OpTypes "ALLREDUCE", NCCL's "AllReduce", "ReduceScatter") → the
 * contract's op names (`allreduce`, `allgather`, `reducescatter`, `alltoall`, `broadcast`, `send`,
 * `recv`); undefined for what has no contract name (barrier, gather, scatter, reduce, coalesced).
 */
import type { Static } from '@sinclair/typebox';
import type { CollectiveOp } from '../../schema/events.js';

export type CollectiveOpName = Static<typeof CollectiveOp>;

const BY_STEM: Record<string, CollectiveOpName> = {
  allreduce: 'allreduce',
  allgather: 'allgather',
  allgatherintotensor: 'allgather',
  allgatherbase: 'allgather',
  reducescatter: 'reducescatter',
  reducescattertensor: 'reducescatter',
  reducescatterbase: 'reducescatter',
  alltoall: 'alltoall',
  alltoallbase: 'alltoall',
  broadcast: 'broadcast',
  send: 'send',
  recv: 'recv',
};

export function collectiveOp(raw: string): CollectiveOpName | undefined {
  const name = raw.includes(':') ? raw.slice(raw.indexOf(':') + 1) : raw;
  // "send 0->1", "all_reduce_coalesced", "_allgather_base", "all_to_all_single", "all_gather_v".
  const stem = name
    .split(' ')[0]
    .toLowerCase()
    .replace(/_(?:coalesced|single|v|oop)$/g, '')
    .replace(/[^a-z]/g, '');
  return BY_STEM[stem];
}
