import { describe, expect, it } from 'vitest';
import type { FaultEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { FindingLog } from '../findings.js';
import { TRIAGE, triageRow } from './triage.js';
import { FaultTriage, TRIAGE_DEFAULTS } from './xid.js';

const fault = (over: Partial<FaultEvent> & Record<string, unknown>): FaultEvent => ({
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
  return judgeAll(events);
}

function judgeAll(events: FaultEvent[]): Finding[] {
  const out: Finding[] = [];
  const t = new FaultTriage(new FindingLog(out));
  for (const e of events) t.process(e);
  t.flush();
  return out;
}

function one(e: Partial<FaultEvent> & Record<string, unknown>): Finding {
  const fs = judge(fault(e));
  expect(fs).toHaveLength(1);
  return fs[0];
}

/**
 * What each catalogued XID asks of the node, written out by hand from NVIDIA's Xid catalog
 * (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, immediate-action bucket), not
 * derived from the table under test.
 */
const EXPECTED: Record<number, [cls: string, action: string, severity: string]> = {
  8: ['restart_app', 'none', 'warning'],
  13: ['restart_app', 'none', 'warning'],
  31: ['restart_app', 'none', 'warning'],
  43: ['restart_app', 'none', 'warning'],
  45: ['restart_app', 'none', 'warning'],
  48: ['drain_reset', 'drain', 'critical'],
  61: ['reset_gpu', 'cordon', 'warning'],
  62: ['reset_gpu', 'cordon', 'warning'],
  63: ['record', 'none', 'info'], // IGNORE: the remap takes effect at the next reset
  64: ['rma', 'rma', 'critical'], // remapping failure: an RMA threshold
  74: ['reset_gpu', 'cordon', 'warning'],
  79: ['reboot_node', 'drain', 'critical'], // RESTART_BM
  92: ['record', 'none', 'info'],
  94: ['restart_app', 'none', 'warning'],
  95: ['reset_gpu', 'cordon', 'warning'],
  109: ['reset_gpu', 'cordon', 'warning'],
  119: ['reset_gpu', 'cordon', 'warning'],
  120: ['reset_gpu', 'cordon', 'warning'],
  136: ['reset_gpu', 'cordon', 'warning'],
  140: ['reset_gpu', 'cordon', 'warning'],
  143: ['reset_gpu', 'cordon', 'warning'],
  // NVLink5 without a 154 within the window and without a Fatal/Nonfatal word: a reset.
  144: ['reset_gpu', 'cordon', 'warning'],
  145: ['reset_gpu', 'cordon', 'warning'],
  146: ['reset_gpu', 'cordon', 'warning'],
  147: ['reset_gpu', 'cordon', 'warning'],
  148: ['reset_gpu', 'cordon', 'warning'],
  149: ['reset_gpu', 'cordon', 'warning'],
  150: ['reset_gpu', 'cordon', 'warning'],
  // A 154 without its action code (a truncated line): the table's reset.
  154: ['reset_gpu', 'cordon', 'warning'],
};

describe('triage table', () => {
  it('covers exactly the codes this test pins (a new code needs a line here)', () => {
    expect(TRIAGE.map((r) => r.code)).toEqual(
      Object.keys(EXPECTED)
        .map(Number)
        .sort((a, b) => a - b),
    );
  });

  it('every row names its catalog bucket and driver range', () => {
    for (const r of TRIAGE) {
      expect(r.bucket, `XID ${r.code}`).toMatch(/^[A-Z_0-9]+$/);
      expect(r.drivers.length, `XID ${r.code}`).toBeGreaterThan(3);
      expect(r.gpus.length, `XID ${r.code}`).toBeGreaterThan(3);
    }
  });

  for (const [code, [cls, action, severity]] of Object.entries(EXPECTED)) {
    it(`XID ${code} -> ${cls}: action ${action}, severity ${severity}`, () => {
      const f = one({ code: Number(code) });
      expect(f).toMatchObject({ type: 'xid', state: 'open', action, severity, host: 'gpu-0001', gpu: 3 });
      expect(f).toMatchObject({ job: 'j1', rank: 11, onset_ts: 1_000 });
      expect(f.evidence).toMatchObject({ code: Number(code), recovery: cls, count: 1 });
      expect(f.evidence.class).toBe(triageRow(Number(code))?.name);
      expect(f.summary).toMatch(new RegExp(`^gpu-0001/3: XID ${code} \\(.*\\); recovery: ${cls}\\.$`));
    });
  }

  it('names the headline codes as NVIDIA does', () => {
    expect(triageRow(79)?.name).toMatch(/fallen off the bus/i);
    expect(triageRow(48)?.name).toMatch(/double-bit ecc/i);
    expect(triageRow(64)?.name).toMatch(/row remapping failure/i);
  });

  it('an unknown code is for a person to look at: watch, warning, nothing automatic', () => {
    const f = one({ code: 999 });
    expect(f).toMatchObject({ type: 'xid', action: 'watch', severity: 'warning' });
    expect(f.summary).toContain("not in rankwatch's table");
  });

  it('parses a code sent as a string; keeps a non-numeric one as given', () => {
    expect(one({ code: '79' })).toMatchObject({ action: 'drain', severity: 'critical' });
    const bad = one({ code: 'n/a' });
    expect(bad).toMatchObject({ action: 'watch' });
    expect(bad.evidence.code).toBe('n/a');
  });
});

describe('Xid 154: the driver says what the GPU needs', () => {
  for (const [code, name, cls, action] of [
    [1, 'GPU Reset Required', 'reset_gpu', 'cordon'],
    [2, 'Node Reboot Required', 'reboot_node', 'drain'],
    [3, 'Drain P2P', 'drain_reset', 'drain'],
    [4, 'Drain and Reset', 'drain_reset', 'drain'],
    [5, 'Recover IMEX Domain', 'reset_gpu', 'cordon'],
    [6, 'Bus Reset', 'reset_gpu', 'cordon'],
    [7, 'System Reboot', 'reboot_node', 'drain'],
    [12, 'Something New', 'reset_gpu', 'cordon'],
  ] as const) {
    it(`0x${code.toString(16)} (${name}) -> ${cls}`, () => {
      const f = one({ code: 154, recovery_action: code, recovery_action_name: name });
      expect(f).toMatchObject({ action });
      expect(f.evidence).toMatchObject({ recovery: cls, recovery_action: code, recovery_action_name: name });
      expect(f.summary).toContain(`asks for 0x${code.toString(16)} (${name})`);
    });
  }

  it('to None with nothing pending opens nothing', () => {
    expect(judge(fault({ code: 154, recovery_action: 0 }))).toEqual([]);
  });

  it('overrides the static table for its GPU until a transition back to None clears it', () => {
    const out: Finding[] = [];
    const t = new FaultTriage(new FindingLog(out));
    t.process(fault({ code: 154, recovery_action: 2, recovery_action_name: 'Node Reboot Required' }));
    expect(t.overrideFor('gpu-0001', 3)).toBe('reboot_node');
    // An app fault on the overridden GPU is judged by the driver's verdict, another GPU's is not.
    t.process(fault({ code: 13, ts: 60_000 }));
    t.process(fault({ code: 13, ts: 60_000, gpu: 4 }));
    expect(out[1]).toMatchObject({ gpu: 3, action: 'drain' });
    expect(out[1].evidence).toMatchObject({ driver_override: 'reboot_node', related_finding: out[0].id });
    expect(out[2]).toMatchObject({ gpu: 4, action: 'none' });
    // The driver changes its mind: the same finding is updated, not a second one.
    t.process(fault({ code: 154, recovery_action: 1, ts: 120_000 }));
    expect(out[3]).toMatchObject({ id: out[0].id, state: 'update', action: 'cordon' });
    t.process(fault({ code: 154, recovery_action: 0, recovery_action_name: 'None', ts: 180_000 }));
    expect(out[4]).toMatchObject({ id: out[0].id, state: 'resolved' });
    expect(out[4].resolution).toMatch(/back to None/);
    expect(t.overrideFor('gpu-0001', 3)).toBeUndefined();
    t.process(fault({ code: 13, ts: 240_000 }));
    expect(out[5]).toMatchObject({ action: 'none' });
    expect(out[5].evidence.driver_override).toBeUndefined();
  });
});

describe('NVLink Xids wait for a 154', () => {
  it('a 154 within the window decides, and names the NVLink Xids it follows', () => {
    const fs = judge(
      fault({ code: 149, nvlink_fatal: true }),
      fault({ code: 145, ts: 2_000 }),
      fault({ code: 154, recovery_action: 4, recovery_action_name: 'Drain and Reset', ts: 5_000 }),
    );
    expect(fs).toHaveLength(1);
    expect(fs[0]).toMatchObject({ action: 'drain' });
    expect(fs[0].evidence).toMatchObject({ code: 154, nvlink_xids: [149, 145] });
    expect(fs[0].summary).toContain('after NVLink Xid 149, 145');
  });

  it('without a 154 in the window, the Fatal/Nonfatal word decides once the window has passed', () => {
    const out: Finding[] = [];
    const t = new FaultTriage(new FindingLog(out));
    t.process(fault({ code: 149, nvlink_fatal: true }));
    t.process(fault({ code: 145, nvlink_fatal: false, gpu: 4 }));
    t.advance(1_000 + TRIAGE_DEFAULTS.nvlinkWaitMs - 1);
    expect(out).toEqual([]);
    t.advance(1_000 + TRIAGE_DEFAULTS.nvlinkWaitMs);
    expect(out.map((f) => [f.gpu, f.action])).toEqual([
      [3, 'cordon'],
      [4, 'none'],
    ]);
    expect(out[0].summary).toContain('no Xid 154 within 30 s');
    expect(out[0].evidence.count).toBe(1);
    // A 154 after the window is its own finding.
    t.process(fault({ code: 154, recovery_action: 1, ts: 90_000 }));
    expect(out[2].evidence.nvlink_xids).toBeUndefined();
  });

  it('lines of a waiting NVLink Xid are counted into its finding', () => {
    const fs = judge(
      ...[0, 1_000, 2_000].map((ts) => fault({ code: 149, nvlink_fatal: true, ts: 1_000 + ts })),
    );
    expect(fs).toHaveLength(1);
    expect(fs[0].evidence.count).toBe(3);
  });

  it('an NVLink Xid on a GPU whose 154 is already in force is judged by it at once', () => {
    const fs = judge(fault({ code: 154, recovery_action: 2 }), fault({ code: 147, ts: 50_000 }));
    expect(fs[1]).toMatchObject({ action: 'drain' });
    expect(fs[1].evidence.driver_override).toBe('reboot_node');
  });
});

describe('application faults', () => {
  for (const code of [13, 31, 43, 45, 94]) {
    it(`XID ${code} alone never proposes a cordon; the 3rd on one GPU within an hour does`, () => {
      const minutes = (m: number) => 1_000 + m * 60_000;
      const fs = judge(
        fault({ code, ts: minutes(0) }),
        fault({ code, ts: minutes(20), gpu: 5 }), // another GPU: no count toward GPU 3
        fault({ code, ts: minutes(20) }),
        fault({ code, ts: minutes(40) }),
      );
      expect(fs.map((f) => f.action)).toEqual(['none', 'none', 'none', 'cordon']);
      expect(fs[3].evidence).toMatchObject({
        recovery: 'reset_gpu',
        escalated: true,
        app_faults_in_window: 3,
      });
      expect(fs[3].summary).toContain('suspect the GPU');
    });
  }

  it('faults spread over more than the window do not escalate', () => {
    const fs = judge(
      fault({ code: 13, ts: 0 }),
      fault({ code: 31, ts: 40 * 60_000 }),
      fault({ code: 43, ts: 80 * 60_000 }),
      fault({ code: 13, ts: 120 * 60_000 }),
    );
    expect(fs.every((f) => f.action === 'none')).toBe(true);
  });

  it("45 next to another Xid of its GPU is that Xid's cleanup: recorded, not counted", () => {
    const fs = judge(
      fault({ code: 48 }),
      fault({ code: 45, ts: 3_000 }),
      fault({ code: 45, ts: 3_000, gpu: 5 }),
    );
    expect(fs.map((f) => [f.gpu, f.evidence.code, f.evidence.recovery])).toEqual([
      [3, 48, 'drain_reset'],
      [3, 45, 'record'],
      [5, 45, 'restart_app'], // another GPU: alone
    ]);
    expect(fs[1].summary).toContain("cleanup after the GPU's other Xid");
  });

  it('45 caused by a hardware Xid is judged by its root cause', () => {
    const f = one({ code: 45, root_cause_xid: 79 });
    expect(f).toMatchObject({ action: 'drain', severity: 'critical' });
    expect(f.evidence).toMatchObject({ root_cause_xid: 79, root_cause_class: 'GPU has fallen off the bus' });
    expect(f.summary).toContain('caused by XID 79');
    // A milder root cause does not soften a hardware Xid.
    expect(one({ code: 79, root_cause_xid: 13 })).toMatchObject({ action: 'drain' });
  });
});

describe('repeats and storms', () => {
  it('a storm of 200 000 identical lines is one finding whose count says how many', () => {
    const events = Array.from({ length: 200_000 }, (_, i) => fault({ code: 31, ts: 1_000 + i * 5 }));
    const fs = judgeAll(events);
    const ids = new Set(fs.map((f) => f.id));
    expect(ids.size).toBe(1);
    expect(fs[0].state).toBe('open');
    // Updates at 10, 100, 1 000, 10 000, 100 000 lines: bounded, and the last count visible.
    expect(fs.map((f) => f.evidence.count)).toEqual([1, 10, 100, 1_000, 10_000, 100_000]);
    // The storm counts as one application fault, not 200 000: no escalation.
    expect(fs.every((f) => f.action === 'none')).toBe(true);
  });

  it('counted events (dcgm-exporter scrapes 30 s apart) join one occurrence and add their counts', () => {
    const scrape = (i: number) =>
      fault({ code: 31, ts: 1_000 + i * 30_000, count: 500, message: 'XID 31 reported by dcgm-exporter' });
    const fs = judge(scrape(0), scrape(1), scrape(2));
    expect(new Set(fs.map((f) => f.id)).size).toBe(1);
    expect(fs.map((f) => f.evidence.count)).toEqual([500, 1_000]);
    // Uncounted log lines 30 s apart are separate occurrences.
    expect(judge(fault({ code: 31 }), fault({ code: 31, ts: 31_000 }))).toHaveLength(2);
  });

  it('the same code on two GPUs, or two codes on one GPU, are separate occurrences', () => {
    const fs = judge(fault({ code: 79 }), fault({ code: 79, gpu: 4 }), fault({ code: 48, ts: 1_500 }));
    expect(new Set(fs.map((f) => f.id)).size).toBe(3);
  });

  it('a redelivered line is counted into its occurrence; a line after a quiet gap is a new one', () => {
    const e = fault({ code: 79 });
    const gap = TRIAGE_DEFAULTS.sameOccurrenceMs + 1;
    const fs = judge(e, { ...e }, { ...e, ts: 1_000 + gap });
    expect(fs).toHaveLength(2);
    expect(fs[0].id).not.toBe(fs[1].id);
  });

  it('faults of two GPUs whose index is unknown stay two findings, each with its bus id', () => {
    const fs = judge(
      fault({ code: 79, gpu: undefined, pci_bus_id: '0000:b3:00' }),
      fault({ code: 79, gpu: undefined, pci_bus_id: '0000:06:00' }),
    );
    expect(fs).toHaveLength(2);
    expect(fs.map((f) => f.evidence.pci_bus_id)).toEqual(['0000:b3:00', '0000:06:00']);
    expect(fs[0].summary).toMatch(/^gpu-0001 \(PCI 0000:b3:00\): XID 79 /);
  });

  it('a mapped GPU keeps the finding id it had before bus ids were kept', () => {
    expect(one({ code: 79, pci_bus_id: '0000:b3:00' }).id).toBe(one({ code: 79 }).id);
  });
});

describe('ECC faults', () => {
  for (const [message, cls, action] of [
    ['Double-bit ECC error', 'drain_reset', 'drain'],
    ['DBE on page 0x1f', 'drain_reset', 'drain'],
    ['Uncorrectable ECC error detected', 'drain_reset', 'drain'],
    ['Row remapping failure', 'rma', 'rma'],
    ['row remapping pending', 'reset_gpu', 'cordon'],
    ['Single-bit ECC error', 'record', 'none'],
    ['Correctable ECC error', 'record', 'none'],
    // An address that merely contains the letters is no double-bit error.
    ['Single-bit ECC error at address 0x3fdbe000', 'record', 'none'],
  ] as const) {
    it(`"${message}" -> ${cls}`, () => {
      const f = one({ source: 'ecc', code: undefined, message });
      expect(f).toMatchObject({ type: 'ecc', action });
      expect(f.evidence).toMatchObject({ recovery: cls, class: `ECC ${message}` });
    });
  }

  it('ignores sources other than xid and ecc', () => {
    expect(judge(fault({ source: 'nccl_timeout', code: 79 }), fault({ source: 'exit', code: 1 }))).toEqual(
      [],
    );
  });
});
