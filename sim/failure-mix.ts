/**
 * Published interruption mixes, used as the simulator's default and as test data.
 *
 * Llama 3 (Meta, "The Llama 3 Herd of Models", arXiv:2407.21783, Table 5): root causes of the 419
 * unexpected interruptions of a 54-day snapshot of Llama 3 405B pre-training on 16,384 H100 GPUs
 * (2,048 hosts of 8). The counts add up to 419; the printed percentages do not follow from them
 * (148/419 is 35.3%, printed 30.1%), so only the counts are used. Transcribed from the table as
 * reproduced at https://glennklockwood.com/garden/component-reliability; `category` is the table's.
 */
export interface PublishedCause {
  cause: string;
  category: string;
  count: number;
}

export const LLAMA3_TABLE5: PublishedCause[] = [
  { cause: 'Faulty GPU', category: 'GPU', count: 148 },
  { cause: 'GPU HBM3 Memory', category: 'GPU', count: 72 },
  { cause: 'Software Bug', category: 'Dependency', count: 54 },
  { cause: 'Network Switch/Cable', category: 'Network', count: 35 },
  { cause: 'Host Maintenance', category: 'Unplanned Maintenance', count: 32 },
  { cause: 'GPU SRAM Memory', category: 'GPU', count: 19 },
  { cause: 'GPU System Processor', category: 'GPU', count: 17 },
  { cause: 'NIC', category: 'Host', count: 7 },
  { cause: 'NCCL Watchdog Timeouts', category: 'Unknown', count: 7 },
  { cause: 'Silent Data Corruption', category: 'GPU', count: 6 },
  { cause: 'GPU Thermal Interface + Sensor', category: 'GPU', count: 6 },
  { cause: 'SSD', category: 'Host', count: 3 },
  { cause: 'Power Supply', category: 'Host', count: 3 },
  { cause: 'Server Chassis', category: 'Host', count: 2 },
  { cause: 'IO Expansion Board', category: 'Host', count: 2 },
  { cause: 'Dependency', category: 'Dependency', count: 2 },
  { cause: 'CPU', category: 'Host', count: 2 },
  { cause: 'System Memory', category: 'Host', count: 2 },
];

/** The run behind Table 5. */
export const LLAMA3_RUN = { gpus: 16_384, gpusPerHost: 8, days: 54, interruptions: 419 } as const;
