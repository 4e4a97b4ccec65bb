/**
 * Where each rank sits: Megatron-LM's rank order (tensor-parallel fastest, then data-parallel,
 * then pipeline stage), packed onto hosts of `gpusPerHost` GPUs.
 */
export interface Layout {
  tp: number;
  dp: number;
  pp: number;
  gpusPerHost: number;
}

export interface RankPlace {
  rank: number;
  host: string;
  hostIndex: number;
  gpu: number;
  tp: number;
  dp: number;
  stage: number;
}

export function hostName(index: number): string {
  return `gpu-${String(index).padStart(4, '0')}`;
}

export function place(rank: number, l: Layout): RankPlace {
  const tp = rank % l.tp;
  const dp = Math.floor(rank / l.tp) % l.dp;
  const stage = Math.floor(rank / (l.tp * l.dp));
  const hostIndex = Math.floor(rank / l.gpusPerHost);
  return { rank, host: hostName(hostIndex), hostIndex, gpu: rank % l.gpusPerHost, tp, dp, stage };
}

export function rankOf(tp: number, dp: number, stage: number, l: Layout): number {
  return stage * l.tp * l.dp + dp * l.tp + tp;
}

/** Picks tp/pp/dp for a world size: tp 8 (one host), pp 4 when it divides, the rest data-parallel. */
export function defaultLayout(worldSize: number, gpusPerHost = 8): Layout {
  const tp = Math.min(8, gpusPerHost, worldSize);
  const rest = Math.floor(worldSize / tp);
  const pp = rest % 4 === 0 && rest >= 8 ? 4 : rest % 2 === 0 && rest >= 4 ? 2 : 1;
  const dp = Math.floor(rest / pp);
  if (tp * dp * pp !== worldSize) throw new Error(`world size ${worldSize} is not a multiple of ${tp}`);
  return { tp, dp, pp, gpusPerHost };
}
