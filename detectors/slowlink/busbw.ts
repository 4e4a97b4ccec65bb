/**
 * Bus bandwidth as nccl-tests defines it (PERFORMANCE.md): algbw = bytes / time, and busbw =
 * algbw x a factor per collective that makes it comparable with the link's hardware speed.
 */
export function busbwFactor(op: string, nranks: number): number {
  const n = Math.max(1, nranks);
  switch (op) {
    case 'allreduce':
      return (2 * (n - 1)) / n;
    case 'allgather':
    case 'reducescatter':
    case 'alltoall':
      return (n - 1) / n;
    default:
      return 1; // broadcast, reduce, send, recv
  }
}

/** Bus bandwidth in GB/s. */
export function busbwGBps(op: string, nranks: number, bytes: number, durMs: number): number {
  return ((bytes / (durMs / 1000)) * busbwFactor(op, nranks)) / 1e9;
}
