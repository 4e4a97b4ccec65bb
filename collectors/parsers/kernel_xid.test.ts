import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { parseKernelLine } from './kernel_xid.js';

const lines = readFileSync(join(import.meta.dirname, 'fixtures', 'kernel-xid.log'), 'utf8')
  .split('\n')
  .filter(Boolean);
const NOW = 1_764_480_000_000;
const ctx = {
  host: 'gpu-0017',
  pciToGpu: new Map([
    ['0000:18:00', 0],
    ['0000:2a:00', 1],
    ['0000:3b:00', 2],
    ['0000:db:00', 7],
  ]),
};

describe('kernel log → XID faults', () => {
  const out = lines.map((l, i) => parseKernelLine(l, i + 1, NOW, ctx));
  const events = out.flatMap((o) => ('event' in o ? [o.event] : []));

  it('parses every variant: PCI prefix or not, pid/name or not, journal/dmesg/kmsg prefixes', () => {
    expect(events.map((e) => [e.gpu, e.code, e.pid, e.process])).toEqual([
      [2, 79, '48213', 'python3'],
      [0, 48, undefined, undefined],
      [1, 13, undefined, undefined],
      [7, 31, '9912', 'pt_main_thread'],
      [2, 119, undefined, undefined],
    ]);
    for (const e of events) {
      expect(validateEvent(e).ok).toBe(true);
      expect(e).toMatchObject({ kind: 'fault', host: 'gpu-0017', source: 'xid' });
    }
    expect(events[0].message).toBe('GPU has fallen off the bus.');
    expect(events[0].ts).toBe(Date.parse('2026-11-30T05:12:01Z'));
    expect(events[1].ts).toBe(NOW);
    expect(events[4].message).toMatch(/^Timeout after 6s/);
  });

  it('ignores other kernel lines and reports truncated or garbled XID lines by number', () => {
    expect(out.filter((o) => 'ignored' in o)).toHaveLength(2);
    expect(out.flatMap((o) => ('problem' in o ? [o.problem.line] : []))).toEqual([7, 8]);
  });

  it('keeps the bus id and leaves gpu out when the bus id is not mapped', () => {
    const r = parseKernelLine(lines[0], 1, NOW, { host: 'h', pciToGpu: new Map() });
    expect('event' in r).toBe(true);
    if (!('event' in r)) return;
    expect(r.event).not.toHaveProperty('gpu');
    expect(r.event.pci_bus_id).toBe('0000:3b:00');
  });
});
