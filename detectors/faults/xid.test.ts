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
