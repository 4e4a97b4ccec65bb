/**
 * One small job per fault family the simulator injects: what the sharded layout's equality checks
 * run (tests/kafka-sharded.int.test.ts, detectors/sharded.test.ts, the soak's sharded path), each
 * family with a fault its detectors find at 64 ranks within 120 steps.
 */
import type { FAULT_TYPES } from './faults.js';

export const FAMILY_FAULTS: Record<(typeof FAULT_TYPES)[number], string> = {
  throttle: 'throttle:rank=21,at=30,depth=0.2',
  slow_rank: 'slow_rank:rank=13,at=30,slowdown=0.1',
  intermittent: 'intermittent:rank=5,at=30,slowdown=0.3,every=3',
  nic: 'nic:rank=20,at=30,factor=3',
  link: 'link:rank=3,peer=19,at=30,factor=4',
  power_brake: 'power_brake:host=2,at=30,depth=0.45',
  xid: 'xid:rank=9,at=30,code=79',
  flap: 'flap:rank=28,at=30,factor=3,every=8',
  drift: 'drift:rank=22,at=10,slowdown=0.1,ramp=60',
  nvlink: 'nvlink:rank=14,at=30,factor=3,code=74',
  hang: 'hang:rank=30,at=40,for=660',
  hang_allreduce: 'hang_allreduce:rank=30,at=40,for=660',
  stall: 'stall:rank=12,at=10,every=20,jitter=2,stall=3-6',
};
