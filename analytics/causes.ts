/**
 * Interruption causes: an open vocabulary (whatever a job_event's `cause` or a fault says), each
 * mapped to one coarse group. Known names map exactly; others by keywords, checked in order, so
 * "GPU HBM3 memory" is memory before it is GPU and "system memory" is memory, not host.
 */
export const CAUSE_GROUPS = ['gpu', 'memory', 'network', 'host', 'software', 'other'] as const;
export type CauseGroup = (typeof CAUSE_GROUPS)[number];

/** Lower case, runs of anything but letters and digits become one `_`. */
export function normalizeCause(cause: string): string {
  return cause
    .trim()
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '');
}

/** XIDs by what failed (NVIDIA's XID catalogue): memory errors, else the GPU. */
const MEMORY_XIDS = new Set([48, 63, 64, 92, 94, 95, 140]);

/** Names with a fixed group: Llama 3's Table 5 components and the fault sources collectors emit. */
const EXACT: Record<string, CauseGroup> = {
  faulty_gpu: 'gpu',
  gpu_hbm3_memory: 'memory',
  software_bug: 'software',
  network_switch_cable: 'network',
  host_maintenance: 'host',
  gpu_sram_memory: 'memory',
  gpu_system_processor: 'gpu',
  nic: 'network',
  // Llama 3 files these under "Unknown": a timeout says a peer stopped, not which part failed.
  nccl_watchdog_timeouts: 'other',
  nccl_timeout: 'other',
  silent_data_corruption: 'gpu',
  gpu_thermal_interface_sensor: 'gpu',
  ssd: 'host',
  power_supply: 'host',
  server_chassis: 'host',
  io_expansion_board: 'host',
  dependency: 'software',
  cpu: 'host',
  system_memory: 'memory',
  ecc: 'memory',
  link: 'network',
  exit: 'software',
  oom: 'software',
  unknown: 'other',
};

/** Whole words between `_` (so "panic" is not a NIC), with optional trailing digits or plural s. */
const words = (...w: string[]) => new RegExp(`(^|_)(${w.join('|')})(\\d*|s)(_|$)`);

const KEYWORDS: [RegExp, CauseGroup][] = [
  [/hbm|sram|ecc|dram|dimm|memory|row_remap/, 'memory'],
  [/nvlink/, 'gpu'],
  [/network|switch|cable|infiniband|roce|optic|transceiver/, 'network'],
  [words('nic', 'link', 'ib', 'hca', 'port'), 'network'],
  [/gpu|silent_data|thermal/, 'gpu'],
  [words('xid', 'sdc'), 'gpu'],
  [/host|cpu|ssd|disk|power|chassis|board|bmc|maintenance|kernel/, 'host'],
  [words('node', 'psu'), 'host'],
  [/software|bug|dependency|crash|python|segfault|loss_spike/, 'software'],
  [words('exit', 'oom', 'nan', 'code'), 'software'],
];

export function causeGroup(cause: string): CauseGroup {
  const c = normalizeCause(cause);
  const xid = /^xid_?(\d+)$/.exec(c);
  if (xid) return MEMORY_XIDS.has(Number(xid[1])) ? 'memory' : 'gpu';
  if (EXACT[c]) return EXACT[c];
  for (const [re, group] of KEYWORDS) if (re.test(c)) return group;
  return 'other';
}

/** The cause name a fault event stands for: `xid_79`, `ecc`, `link`, `exit_137`, … */
export function causeOfFault(source: string, code?: string | number | null): string {
  const s = normalizeCause(source) || 'unknown';
  const c = code === undefined || code === null ? '' : normalizeCause(String(code));
  return c === '' ? s : `${s}_${c}`;
}
