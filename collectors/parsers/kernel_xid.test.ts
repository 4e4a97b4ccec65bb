import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { KernelLogParser, parseKernelLine, splitPrefix } from './kernel_xid.js';

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
    // Journal "short" is local time without a year: the log's time, in the read time's year.
    expect(events[1].ts).toBe(new Date(new Date(NOW).getFullYear(), 10, 30, 5, 12, 3).getTime());
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

describe('kernel log as it really reads (public reports, fixtures/kernel-real.log)', () => {
  const real = readFileSync(join(import.meta.dirname, 'fixtures', 'kernel-real.log'), 'utf8');
  const BOOT = Date.parse('2026-11-30T00:00:00Z');
  const map = new Map([['0000:b3:00', 5]]);
  function read(text: string) {
    const p = new KernelLogParser({ host: 'gpu-0017', pciToGpu: map, bootTimeMs: BOOT });
    const out = [
      ...text
        .split('\n')
        .filter((l) => l !== '' && !l.startsWith('#'))
        .flatMap((l, i) => p.push(l, i + 1, NOW)),
      ...p.flush(),
    ];
    return {
      events: out.flatMap((o) => ('event' in o ? [o.event] : [])),
      problems: out.flatMap((o) => ('problem' in o ? [o.problem] : [])),
    };
  }

  it('reads every real line without a parse problem', () => {
    const { events, problems } = read(real);
    expect(problems).toEqual([]);
    for (const e of events) expect(validateEvent(e).ok).toBe(true);
    expect(events.map((e) => [e.code, e.pci_bus_id])).toEqual([
      [79, '0000:b3:00'],
      [79, '0000:06:00'],
      [45, '0000:dc:00'],
      [45, '0000:ed:00'],
      [144, '0000:01:00'],
      [149, '0000:00:00'],
      [145, '0018:01:00'],
      [154, '0008:01:00'],
      [119, '0002:00:00'],
      [13, '0000:cb:00'],
    ]);
  });

  it('treats "fallen off the bus" without an Xid line as Xid 79, once per GPU, at the log time', () => {
    const { events } = read(real);
    const [offBus, withXid] = events;
    expect(offBus).toMatchObject({ code: 79, gpu: 5, xid_inferred: true });
    expect(offBus.ts).toBe(BOOT + 1_843_308.145);
    // #1151 prints the Xid line and the driver's own off-bus line: one event, the Xid's.
    expect(withXid).toMatchObject({ code: 79, message: 'GPU has fallen off the bus.' });
    expect(withXid).not.toHaveProperty('xid_inferred');
    // #1027: the same opening words about a GPU that needs the open modules is not a fault.
    expect(events.filter((e) => e.pci_bus_id === '0000:01:00' && e.code === 79)).toEqual([]);
  });

  it('keeps the root cause, the NVLink Fatal/Nonfatal word and the 154 recovery action', () => {
    const { events } = read(real);
    const by = (code: number) => events.filter((e) => e.code === code);
    expect(by(45).map((e) => e.root_cause_xid)).toEqual([149, 145]);
    expect(by(45)[0]).toMatchObject({ pid: '1818990', process: 'python3' });
    expect([...by(144), ...by(149), ...by(145)].map((e) => [e.code, e.nvlink_fatal])).toEqual([
      [144, false],
      [149, true],
      [145, false],
    ]);
    expect(by(154)[0]).toMatchObject({
      recovery_action: 1,
      recovery_action_name: 'GPU Reset Required',
      recovery_action_from: 0,
    });
  });

  it("keeps the log's own time: dmesg [secs] and kmsg µs via boot time, dmesg -T, journal, shippers", () => {
    const { events } = read(real);
    expect(events.find((e) => e.code === 119)?.ts).toBe(BOOT + 16_450_076_435.595);
    expect(events.find((e) => e.code === 13)?.ts).toBe(new Date(2024, 7, 30, 11, 43, 9).getTime());
    const line = 'NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001)';
    expect(splitPrefix(`6,2345,1234567890123,-;${line}`, NOW, BOOT)).toEqual({
      ts: BOOT + 1_234_567_890.123,
      text: line,
    });
    expect(splitPrefix('2026-11-30T05:12:01.123456+00:00 gpu-0017 kernel: x', NOW).ts).toBe(
      Date.parse('2026-11-30T05:12:01.123Z'),
    );
    // kubectl logs --timestamps in front of a journal line: the journal's time wins.
    expect(splitPrefix('2026-11-30T07:00:00.000000001Z Nov 30 05:12:03 gpu-0017 kernel: x', NOW).ts).toBe(
      new Date(new Date(NOW).getFullYear(), 10, 30, 5, 12, 3).getTime(),
    );
    // Only the shipper's stamp: better than the read time.
    expect(splitPrefix(`2026-11-30T07:00:00.5Z ${line}`, NOW)).toEqual({
      ts: Date.parse('2026-11-30T07:00:00.500Z'),
      text: line,
    });
    // No stamp at all, or boot-relative without a boot time: the read time.
    expect(splitPrefix(`[ 1843.308145] ${line}`, NOW).ts).toBeUndefined();
  });

  it('reads the same lines with CRLF, tabs, kmsg-escaped record lines and a shipper prefix', () => {
    const crlf = read(real.replaceAll('\n', '\r\n'));
    expect(crlf.problems).toEqual([]);
    expect(crlf.events.map((e) => e.code)).toEqual(read(real).events.map((e) => e.code));
    const tabs = read(real.replaceAll(', ', ',\t'));
    expect(tabs.events.find((e) => e.code === 45)).toMatchObject({ pid: '1818990', root_cause_xid: 149 });
    const kmsg = read(
      '3,900,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) installed in this system has\\x0aNVRM: fallen off the bus and is not responding to commands.',
    );
    expect(kmsg.events).toHaveLength(1);
    expect(kmsg.events[0]).toMatchObject({ code: 79, gpu: 5, ts: BOOT + 1_843_308.145 });
    const shipped = read(
      real
        .split('\n')
        .map((l) => (l && !l.startsWith('#') ? `2026-12-01T00:00:00.000000000Z ${l}` : l))
        .join('\n'),
    );
    expect(shipped.problems).toEqual([]);
    expect(shipped.events.map((e) => e.code)).toEqual(read(real).events.map((e) => e.code));
  });

  it('reports a truncated last Xid line once, as a problem with its reason', () => {
    const cut = 'Nov 30 05:12:06 gpu-0017 kernel: NVRM: Xid (PCI:0000:3b:';
    const { events, problems } = read(cut);
    expect(events).toEqual([]);
    expect(problems).toHaveLength(1);
    expect(problems[0].reason).toMatch(/unknown or truncated/);
  });

  it('reads an Xid 154 whose action wraps onto the next line, and one whose action never comes', () => {
    const wrapped = read(
      [
        'Jul 26 08:17:15 host kernel: NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None)',
        '                                 to 0x2 (Node Reboot Required)',
        'Jul 26 08:17:16 host kernel: NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None)',
        'Jul 26 08:17:16 host kernel: NVRM: something else',
      ].join('\n'),
    );
    expect(wrapped.problems).toEqual([]);
    expect(wrapped.events.map((e) => [e.code, e.recovery_action, e.recovery_action_name])).toEqual([
      [154, 2, 'Node Reboot Required'],
      [154, undefined, undefined],
    ]);
  });
});
