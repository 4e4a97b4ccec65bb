import { describe, expect, it } from 'vitest';
import type { FaultEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { FindingLog } from '../findings.js';
import { classifyXid, findFault, XID_CLASSES } from './xid.js';

const fault = (over: Partial<FaultEvent>): FaultEvent => ({
  v: 1,
  kind: 'fault',
  ts: 1_000,
  host: 'gpu-0001',
  gpu: 3,
  job: 'j1',
  rank: 11,
  source: 'xid',
  message: 'test',
  ...over,
});

function judge(...events: FaultEvent[]): Finding[] {
  const out: Finding[] = [];
  const log = new FindingLog(out);
  for (const e of events) findFault(e, log);
  return out;
}

function one(e: Partial<FaultEvent>): Finding {
  const fs = judge(fault(e));
  expect(fs).toHaveLength(1);
  return fs[0];
}

/** What each catalogued XID asks of the node, written out by hand (not derived from the table). */
const EXPECTED: Record<number, [recovery: string, action: string, severity: string]> = {
  13: ['app', 'none', 'info'],
  31: ['app', 'none', 'info'],
  43: ['app', 'none', 'info'],
  45: ['retry', 'watch', 'warning'],
  48: ['drain', 'drain', 'critical'],
  61: ['reset', 'cordon', 'warning'],
  62: ['reset', 'cordon', 'warning'],
  63: ['reset', 'cordon', 'warning'], // a pending row remap takes effect only after a GPU reset
  64: ['drain', 'drain', 'critical'],
  74: ['reset', 'cordon', 'warning'],
  79: ['drain', 'drain', 'critical'],
  92: ['retry', 'watch', 'warning'],
  94: ['reset', 'cordon', 'warning'],
  95: ['drain', 'drain', 'critical'],
  119: ['reset', 'cordon', 'warning'],
  120: ['reset', 'cordon', 'warning'],
  140: ['drain', 'drain', 'critical'],
  // Without their Fatal/Nonfatal word or action code, the newer codes default to a reset.
  144: ['reset', 'cordon', 'warning'],
  145: ['reset', 'cordon', 'warning'],
  146: ['reset', 'cordon', 'warning'],
  147: ['reset', 'cordon', 'warning'],
  148: ['reset', 'cordon', 'warning'],
  149: ['reset', 'cordon', 'warning'],
  150: ['reset', 'cordon', 'warning'],
  154: ['reset', 'cordon', 'warning'],
};

describe('XID classification', () => {
  it('covers exactly the codes this test pins (a new code needs a line here)', () => {
    expect(
      Object.keys(XID_CLASSES)
        .map(Number)
        .sort((a, b) => a - b),
    ).toEqual(
      Object.keys(EXPECTED)
        .map(Number)
        .sort((a, b) => a - b),
    );
  });

  for (const [code, [recovery, action, severity]] of Object.entries(EXPECTED)) {
    it(`XID ${code} -> ${recovery}: action ${action}, severity ${severity}`, () => {
      const f = one({ code: Number(code) });
      expect(f).toMatchObject({
        type: 'xid',
        state: 'open',
        action,
        severity,
        host: 'gpu-0001',
        gpu: 3,
        job: 'j1',
        rank: 11,
        onset_ts: 1_000,
      });
      expect(f.evidence).toMatchObject({
        code: Number(code),
        recovery,
        class: XID_CLASSES[Number(code)].name,
      });
      expect(f.summary).toBe(
        `gpu-0001/3: XID ${code} (${XID_CLASSES[Number(code)].name}); recovery: ${recovery}.`,
      );
    });
  }

  it('names the headline codes as NVIDIA does', () => {
    expect(classifyXid(79).name).toMatch(/fallen off the bus/i);
    expect(classifyXid(48).name).toMatch(/double-bit ecc/i);
    expect(classifyXid(63).name).toMatch(/row remapping/i);
    expect(classifyXid(64).name).toMatch(/row remapping failure/i);
  });

  it('reports an unknown code for a person to look at: watch, warning', () => {
    expect(classifyXid(999)).toEqual({ name: "XID 999 (not in rankwatch's table)", recovery: 'retry' });
    const f = one({ code: 999 });
    expect(f).toMatchObject({ type: 'xid', action: 'watch', severity: 'warning' });
    expect(f.evidence).toMatchObject({ code: 999, recovery: 'retry' });
    expect(f.summary).toContain("not in rankwatch's table");
  });

  it('parses a code sent as a string', () => {
    const f = one({ code: '79' });
    expect(f).toMatchObject({ action: 'drain', severity: 'critical' });
    expect(f.evidence.code).toBe(79);
  });

  it('keeps a non-numeric or missing code as given and treats it as unknown', () => {
    const bad = one({ code: 'n/a' });
    expect(bad).toMatchObject({ action: 'watch', severity: 'warning' });
    expect(bad.evidence.code).toBe('n/a');
    const none = one({ code: undefined, ts: 2_000 });
    expect(none).toMatchObject({ action: 'watch', severity: 'warning' });
    expect(none.evidence.code).toBeUndefined();
  });
});

describe('ECC faults', () => {
  for (const message of [
    'Double-bit ECC error',
    'DBE on page 0x1f',
    'Uncorrectable ECC error detected',
    'uncorrected memory error',
  ]) {
    it(`"${message}" asks for a drain: action drain, severity critical`, () => {
      const f = one({ source: 'ecc', code: undefined, message });
      expect(f).toMatchObject({
        type: 'ecc',
        action: 'drain',
        severity: 'critical',
        host: 'gpu-0001',
        gpu: 3,
      });
      expect(f.evidence).toMatchObject({ recovery: 'drain', class: `ECC ${message}`, message });
    });
  }

  for (const message of [
    'Single-bit ECC error',
    'SBE count rising',
    'Correctable ECC error',
    // An address or word that merely contains the letters is no double-bit error.
    'Single-bit ECC error at address 0x3fdbe000',
    'SBE count doubled in an hour',
  ]) {
    it(`"${message}" is watched: action watch, severity warning`, () => {
      const f = one({ source: 'ecc', code: undefined, message });
      expect(f).toMatchObject({ type: 'ecc', action: 'watch', severity: 'warning' });
      expect(f.evidence).toMatchObject({ recovery: 'retry' });
    });
  }
});

describe('fault events in general', () => {
  it('ignores sources other than xid and ecc', () => {
    expect(judge(fault({ source: 'nccl_timeout', code: 79 }), fault({ source: 'exit', code: 1 }))).toEqual(
      [],
    );
  });

  it('opens one finding per incident: a redelivered event is ignored, a later one is new', () => {
    const e = fault({ code: 79 });
    const fs = judge(e, { ...e }, { ...e, ts: 5_000 });
    expect(fs).toHaveLength(2);
    expect(fs[0].id).not.toBe(fs[1].id);
  });

  it('a host-level fault names the host alone', () => {
    const f = one({ code: 79, gpu: undefined });
    expect(f.gpu).toBeUndefined();
    expect(f.summary).toMatch(/^gpu-0001: XID 79 /);
  });
});

describe('what the fault says about itself', () => {
  for (const [action, name, recovery, act, severity] of [
    [0, 'None', 'app', 'none', 'info'],
    [1, 'GPU Reset Required', 'reset', 'cordon', 'warning'],
    [2, 'Node Reboot Required', 'reboot', 'drain', 'critical'],
    [4, 'Drain and Reset', 'drain', 'drain', 'critical'],
  ] as const) {
    it(`Xid 154 to 0x${action} (${name}) -> ${recovery}: ${act}, ${severity}`, () => {
      const f = one({
        code: 154,
        recovery_action: action,
        recovery_action_name: name,
      } as Partial<FaultEvent>);
      expect(f).toMatchObject({ action: act, severity });
      expect(f.evidence).toMatchObject({ recovery, recovery_action: action, recovery_action_name: name });
      expect(f.summary).toContain(`asks for 0x${action} (${name})`);
    });
  }

  it('NVLink 144-150: Fatal asks for a reset, Nonfatal is watched', () => {
    const fatal = one({ code: 149, nvlink_fatal: true } as Partial<FaultEvent>);
    expect(fatal).toMatchObject({ action: 'cordon', severity: 'warning' });
    expect(fatal.evidence).toMatchObject({ nvlink_fatal: true, recovery: 'reset' });
    const nonfatal = one({ code: 145, nvlink_fatal: false } as Partial<FaultEvent>);
    expect(nonfatal).toMatchObject({ action: 'watch', severity: 'warning' });
    expect(nonfatal.summary).toContain('Nonfatal');
  });

  it('"caused by previous Xid N" keeps the root cause and is judged by the worse of the two', () => {
    const f = one({ code: 45, root_cause_xid: 79 } as Partial<FaultEvent>);
    expect(f.evidence).toMatchObject({
      code: 45,
      root_cause_xid: 79,
      root_cause_class: 'GPU has fallen off the bus',
    });
    expect(f).toMatchObject({ action: 'drain', severity: 'critical' });
    expect(f.summary).toContain('caused by XID 79');
    // A root cause milder than the fault itself does not soften it.
    expect(one({ code: 79, root_cause_xid: 13, ts: 3_000 } as Partial<FaultEvent>)).toMatchObject({
      action: 'drain',
    });
  });

  it('faults of two GPUs whose index is unknown stay two findings, each with its bus id', () => {
    const a = fault({ code: 79, gpu: undefined, pci_bus_id: '0000:b3:00' } as Partial<FaultEvent>);
    const b = fault({ code: 79, gpu: undefined, pci_bus_id: '0000:06:00' } as Partial<FaultEvent>);
    const fs = judge(a, b);
    expect(fs).toHaveLength(2);
    expect(fs[0].id).not.toBe(fs[1].id);
    expect(fs.map((f) => f.evidence.pci_bus_id)).toEqual(['0000:b3:00', '0000:06:00']);
    expect(fs[0].summary).toMatch(/^gpu-0001 \(PCI 0000:b3:00\): XID 79 /);
  });

  it('a mapped GPU keeps the finding id it had before bus ids were kept', () => {
    const withBus = one({ code: 79, pci_bus_id: '0000:b3:00' } as Partial<FaultEvent>);
    const without = one({ code: 79 });
    expect(withBus.id).toBe(without.id);
  });
});
