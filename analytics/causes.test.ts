import { describe, expect, it } from 'vitest';
import { LLAMA3_TABLE5 } from '../sim/failure-mix.js';
import { causeGroup, causeOfFault, normalizeCause } from './causes.js';

describe('cause vocabulary', () => {
  it("maps every component of Llama 3's Table 5 to a coarse group", () => {
    // The table's own categories, except where a coarse group says more than the table does:
    // on-package memory is memory, a NIC is network, an NCCL timeout names no part (other).
    const fromCategory: Record<string, string> = {
      GPU: 'gpu',
      Dependency: 'software',
      Network: 'network',
      'Unplanned Maintenance': 'host',
      Host: 'host',
      Unknown: 'other',
    };
    const override: Record<string, string> = {
      'GPU HBM3 Memory': 'memory',
      'GPU SRAM Memory': 'memory',
      'System Memory': 'memory',
      NIC: 'network',
    };
    for (const c of LLAMA3_TABLE5)
      expect([c.cause, causeGroup(c.cause)]).toEqual([
        c.cause,
        override[c.cause] ?? fromCategory[c.category],
      ]);
    expect(LLAMA3_TABLE5.reduce((s, c) => s + c.count, 0)).toBe(419);
  });

  it('keeps the vocabulary open: unseen names fall to keywords, then other', () => {
    expect(causeGroup('HBM uncorrectable error')).toBe('memory');
    expect(causeGroup('NVLink down')).toBe('gpu');
    expect(causeGroup('IB port flap')).toBe('network');
    expect(causeGroup('kernel panic')).toBe('host');
    expect(causeGroup('python segfault')).toBe('software');
    expect(causeGroup('cosmic ray')).toBe('other');
  });

  it('names faults by source and code, and groups XIDs by what failed', () => {
    expect(causeOfFault('xid', 79)).toBe('xid_79');
    expect(causeGroup(causeOfFault('xid', 79))).toBe('gpu');
    expect(causeGroup(causeOfFault('xid', '48'))).toBe('memory');
    expect(causeGroup(causeOfFault('ecc'))).toBe('memory');
    expect(causeGroup(causeOfFault('link', ''))).toBe('network');
    expect(causeGroup(causeOfFault('exit', 137))).toBe('software');
    expect(causeGroup(causeOfFault('nccl_timeout'))).toBe('other');
    expect(normalizeCause('  Network Switch/Cable ')).toBe('network_switch_cable');
  });
});
