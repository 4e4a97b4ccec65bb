import { describe, expect, it } from 'vitest';
import type { CheckEvent, GpuEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { HEALTH_DEFAULTS, NodeHealth, type Transition } from './health.js';

const DAY = 86_400_000;
let n = 0;
const finding = (over: Partial<Finding>): Finding => ({
  id: `f-${++n}`,
  ts: 1_000,
  type: 'xid',
  state: 'open',
  host: 'gpu-0007',
  gpu: 2,
  severity: 'critical',
  evidence: {},
  action: 'drain',
  summary: 'gpu-0007/2: XID 79',
  ...over,
});
const check = (over: Partial<CheckEvent>): CheckEvent => ({
  v: 1,
  kind: 'check',
  ts: 10_000,
  host: 'gpu-0007',
  tool: 'nccl-tests',
  ok: true,
  busbw_gbs: 360,
  expected_gbs: 370,
  ...over,
});
const path = (ts: Transition[]) => ts.filter((t) => t.gpu === undefined).map((t) => `${t.from}>${t.to}`);

/** A node taken out by an Xid 79 at `t0`, repaired and in verification from `t0 + 1000`. */
function repaired(h: NodeHealth, t0: number): void {
  h.onFinding(finding({ ts: t0 }));
  h.startRepair('gpu-0007', t0 + 500, 'alice');
  h.finishRepair('gpu-0007', t0 + 1_000, 'alice');
}

describe('node health', () => {
  it('an Xid that asks for a drain takes the host and its GPU through suspect to cordoned', () => {
    const h = new NodeHealth();
    const f = finding({});
    const t = h.onFinding(f);
    expect(path(t)).toEqual(['healthy>suspect', 'suspect>cordoned']);
    expect(t.find((x) => x.to === 'cordoned' && x.gpu === 2)).toMatchObject({
      evidence: [f.id],
      actor: 'rankwatch',
    });
    expect(h.state('gpu-0007')).toBe('cordoned');
    expect(h.state('gpu-0007', 2)).toBe('cordoned');
    expect(h.state('gpu-0007', 3)).toBe('healthy');
  });

  it('an application fault alone changes nothing', () => {
    const h = new NodeHealth();
    expect(h.onFinding(finding({ action: 'none', severity: 'warning' }))).toEqual([]);
  });

  it('a suspect returns to healthy when its findings resolve', () => {
    const h = new NodeHealth();
    const f = finding({ type: 'throttle', action: 'watch', severity: 'warning' });
    expect(path(h.onFinding(f))).toEqual(['healthy>suspect']);
    expect(path(h.onFinding({ ...f, state: 'resolved', ts: 5_000 }))).toEqual(['suspect>healthy']);
  });

  it('persistent throttling cordons; a short one does not', () => {
    const h = new NodeHealth();
    h.onFinding(finding({ type: 'throttle', action: 'watch', onset_ts: 0, ts: 0 }));
    expect(h.tick(HEALTH_DEFAULTS.throttlePersistMs - 1)).toEqual([]);
    expect(path(h.tick(HEALTH_DEFAULTS.throttlePersistMs))).toEqual(['suspect>cordoned']);
  });

  it('straggler findings on one host in three different jobs cordon it; three in one job do not', () => {
    const h = new NodeHealth();
    const s = (job: string, ts: number) => finding({ type: 'straggler', action: 'watch', job, ts });
    for (const ts of [1, 2, 3]) h.onFinding(s('a', ts));
    expect(h.state('gpu-0007')).toBe('suspect');
    h.onFinding(s('b', 4));
    const t = h.onFinding(s('c', 5));
    expect(path(t)).toEqual(['suspect>cordoned']);
    expect(t[0].reason).toContain('3 different jobs');
    expect(t[0].evidence).toHaveLength(3);
  });

  it('a check dated before the repair finished is set aside and said so, on the unit until it moves', () => {
    const h = new NodeHealth();
    repaired(h, 1_000); // finished at 2,000
    const ignored: string[] = [];
    expect(h.onCheck(check({ ts: 1_500 }), ignored)).toEqual([]);
    expect(ignored).toEqual([
      'gpu-0007: nccl-tests passed at 1970-01-01T00:00:01.500Z, dated before the repair finished at 1970-01-01T00:00:02.000Z: ignored; only checks run after it count',
      expect.stringMatching(/^gpu-0007\/2: nccl-tests passed at .*: ignored/),
    ]);
    expect(h.unhealthy().find((u) => u.gpu === undefined)?.ignored_check).toMatch(/dated before the repair/);
    h.onCheck(check({ ts: 3_000 }));
    h.onCheck(check({ ts: 4_000, tool: 'dcgm-diag' }));
    expect(h.state('gpu-0007')).toBe('healthy');
    h.onFinding(finding({ id: 'again', ts: 5_000 }));
    expect(h.unhealthy().some((u) => u.ignored_check !== undefined)).toBe(false);
  });

  it('verifying returns to healthy only on a passing nccl-tests run and a diagnostic after the repair', () => {
    const h = new NodeHealth();
    repaired(h, 1_000);
    expect(h.state('gpu-0007')).toBe('verifying');
    // Checks from before the repair prove nothing.
    expect(h.onCheck(check({ ts: 1_500 }))).toEqual([]);
    expect(h.onCheck(check({ ts: 1_600, tool: 'dcgm-diag' }))).toEqual([]);
    expect(h.onCheck(check({ ts: 3_000 }))).toEqual([]);
    const t = h.onCheck(check({ ts: 4_000, tool: 'dcgm-diag' }));
    expect(path(t)).toEqual(['verifying>healthy']);
    expect(t[0].evidence).toEqual(['nccl-tests passed at 3000', 'dcgm-diag passed at 4000']);
    expect(h.state('gpu-0007', 2)).toBe('healthy');
  });

  it('nccl-tests below the expected bandwidth, or a failed diagnostic, send it back to cordoned', () => {
    const h = new NodeHealth();
    repaired(h, 1_000);
    const t = h.onCheck(check({ ts: 3_000, busbw_gbs: 200 }));
    expect(path(t)).toEqual(['verifying>cordoned']);
    expect(t[0].reason).toMatch(/200 GB\/s is below 0.9 of the expected 370/);
    const h2 = new NodeHealth();
    repaired(h2, 1_000);
    expect(path(h2.onCheck(check({ ts: 3_000, tool: 'burn-in', ok: false })))).toEqual([
      'verifying>cordoned',
    ]);
  });

  it('a multi-host nccl-tests run counts for every host it names', () => {
    const h = new NodeHealth();
    repaired(h, 1_000);
    h.onCheck(check({ ts: 3_000, host: 'gpu-0001', hosts: ['gpu-0001', 'gpu-0007'] }));
    expect(path(h.onCheck(check({ ts: 4_000, tool: 'burn-in' })))).toEqual(['verifying>healthy']);
  });

  it('an admin override returns a node and records its author', () => {
    const h = new NodeHealth();
    h.onFinding(finding({}));
    const t = h.override('gpu-0007', 'healthy', 2_000, 'bob', 'replaced the riser');
    expect(t.find((x) => x.gpu === undefined)).toMatchObject({
      to: 'healthy',
      actor: 'bob',
      reason: 'admin override: replaced the riser',
    });
  });

  it('a node cordoned again within 7 days of its return needs a human, good checks or not', () => {
    const h = new NodeHealth();
    repaired(h, 1_000);
    h.onCheck(check({ ts: 3_000 }));
    h.onCheck(check({ ts: 4_000, tool: 'dcgm-diag' }));
    expect(h.state('gpu-0007')).toBe('healthy');
    const again = h.onFinding(finding({ ts: 2 * DAY }));
    expect(again.find((x) => x.to === 'cordoned' && x.gpu === undefined)).toMatchObject({
      needs_human: true,
    });
    h.finishRepair('gpu-0007', 2 * DAY + 10, 'alice');
    h.onCheck(check({ ts: 2 * DAY + 20 }));
    expect(h.onCheck(check({ ts: 2 * DAY + 30, tool: 'dcgm-diag' }))).toEqual([]);
    expect(h.state('gpu-0007')).toBe('verifying');
    expect(h.unhealthy().find((u) => u.gpu === undefined)).toMatchObject({ needs_human: true });
    expect(path(h.override('gpu-0007', 'healthy', 2 * DAY + 40, 'carol', 'checked by hand'))).toEqual([
      'verifying>healthy',
    ]);
    // After 7 days a new cordon is automatic again.
    const later = h.onFinding(finding({ ts: 10 * DAY }));
    expect(later.find((x) => x.to === 'cordoned' && x.gpu === undefined)).toMatchObject({
      needs_human: false,
    });
  });

  it('a hardware fault during verification sends it back to cordoned', () => {
    const h = new NodeHealth();
    repaired(h, 1_000);
    expect(path(h.onFinding(finding({ ts: 5_000 })))).toEqual(['verifying>cordoned']);
  });
});

describe('ECC trends from GPU counters', () => {
  const gpu = (ts: number, sbe: number, dbe: number): GpuEvent => ({
    v: 1,
    kind: 'gpu',
    ts,
    host: 'gpu-0007',
    gpu: 2,
    sm_clock_mhz: 1980,
    throttle_reasons: 0,
    ecc_sbe: sbe,
    ecc_dbe: dbe,
  });

  it('a rise of the uncorrectable count cordons; steady counts do nothing', () => {
    const h = new NodeHealth();
    expect(h.onGpu(gpu(0, 5, 1))).toEqual([]);
    expect(h.onGpu(gpu(1_000, 5, 1))).toEqual([]);
    const t = h.onGpu(gpu(2_000, 5, 2));
    expect(path(t)).toEqual(['healthy>suspect', 'suspect>cordoned']);
    expect(t.find((x) => x.to === 'cordoned' && x.gpu === undefined)?.reason).toBe(
      'uncorrectable ECC count rose from 1 to 2',
    );
  });

  it('corrected errors faster than the daily limit make a suspect; a counter reset starts a new baseline', () => {
    const h = new NodeHealth();
    h.onGpu(gpu(0, 100, 0));
    expect(h.onGpu(gpu(60_000, 600, 0))).toEqual([]);
    expect(h.onGpu(gpu(120_000, 0, 0))).toEqual([]); // a GPU reset cleared the volatile counts
    expect(h.onGpu(gpu(180_000, 900, 0))).toEqual([]);
    const t = h.onGpu(gpu(240_000, 1_200, 0));
    expect(path(t)).toEqual(['healthy>suspect']);
    expect(t[0].reason).toBe('1200 corrected ECC errors within a day (limit 1000)');
  });
});
