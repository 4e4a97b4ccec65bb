import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveOptions } from '../cli/args.js';
import { RankwatchError } from '../core/errors.js';
import type { Finding } from '../schema/finding.js';
import { passingCheck, xidFinding } from '../tests/helpers.js';
import { Automation } from './automation.js';
import { automationFrom, CORDON_OPTIONS } from './cli-options.js';
import { MemoryDriver } from './drivers/memory.js';
import { SAFETY_DEFAULTS, type SafetyConfig, safetyConfig } from './governor.js';

const BIN = join(import.meta.dirname, '..', 'bin', 'rankwatch.js');

const NOW = 1_800_000_000_000;
const BUDGET = { maxShare: 0.1, maxNodes: 4, perHour: 10 };
const xid = (h: string, over: Partial<Finding> = {}) => xidFinding(h, { ts: NOW - 1_000, ...over });
const check = passingCheck;
const host = (i: number) => `gpu-${String(i).padStart(4, '0')}`;

function setup(safety: Partial<SafetyConfig>, driver = new MemoryDriver()) {
  let clock = NOW;
  const a = new Automation({
    driver,
    safety: safetyConfig(safety),
    fleetSize: () => 64,
    now: () => clock,
    attempts: 3,
    baseDelayMs: 1,
  });
  return { a, driver, tick: (ms: number) => (clock += ms), at: () => clock };
}

/** Repair and verify a host: after this its health is healthy again. */
async function repairAndVerify(a: Automation, h: string, at: number) {
  a.startRepair(h, 'alice');
  a.finishRepair(h, 'alice');
  a.onEvents([check(h, 'nccl-tests', at + 10), check(h, 'dcgm-diag', at + 20)]);
  await a.idle();
}

describe('cordon automation under the safety governor', () => {
  it('a burst of findings on 50 of 64 hosts takes out no more than the budget; the rest are refused and audited; the breaker trips and an admin reset clears it', async () => {
    const { a, driver, at } = setup({ enabled: true, ...BUDGET, breakerBurst: 10 });
    a.onFindings(Array.from({ length: 50 }, (_, i) => xid(host(i))));
    await a.idle();
    // 10% of 64 is 6, the absolute limit 4: four nodes out.
    expect(driver.out.size).toBe(4);
    const cordons = a.audit.filter((e) => e.verb === 'cordon');
    expect(cordons).toHaveLength(50);
    expect(cordons.filter((e) => e.outcome === 'done')).toHaveLength(4);
    const refused = cordons.filter((e) => e.outcome === 'refused');
    expect(refused).toHaveLength(46);
    expect(refused.every((e) => e.finding_id.startsWith('xid-') && e.actor === 'rankwatch')).toBe(true);
    expect(refused.filter((e) => e.reason.startsWith('fleet budget'))).toHaveLength(5);
    expect(refused.filter((e) => e.reason.startsWith('breaker tripped'))).toHaveLength(41);
    expect(a.audit.filter((e) => e.verb === 'breaker_trip')).toHaveLength(1);
    expect(a.governor.tripped).toBe(true);

    // Tripped, yet a verified node still returns.
    await repairAndVerify(a, host(0), at());
    expect(driver.out.has(host(0))).toBe(false);
    expect(a.audit.at(-1)).toMatchObject({ verb: 'uncordon', outcome: 'done', host: host(0) });
    // And no new cordon happens while tripped.
    a.onFindings([xid(host(60))]);
    await a.idle();
    expect(a.audit.at(-1)).toMatchObject({
      host: host(60),
      outcome: 'refused',
      reason: expect.stringMatching(/breaker tripped/),
    });

    expect(a.resetBreaker('alice')).toMatchObject({ verb: 'breaker_reset', actor: 'alice', outcome: 'done' });
    expect(a.governor.tripped).toBe(false);
    a.onFindings([xid(host(61))]);
    await a.idle();
    expect(a.audit.at(-1)).toMatchObject({ host: host(61), verb: 'cordon', outcome: 'done' });
    expect(driver.out.size).toBe(4);
  });

  it('is dry-run unless enabled: decisions are audited, nothing is touched', async () => {
    const { a, driver } = setup({});
    a.onFindings([xid(host(1))]);
    await a.idle();
    expect(driver.calls).toEqual([]);
    expect(a.audit).toMatchObject([{ verb: 'cordon', outcome: 'dry_run', host: host(1) }]);
  });

  it('approval mode: the cordon waits for a person, who is recorded as its actor', async () => {
    const { a, driver } = setup({ enabled: true, approval: true, ...BUDGET });
    a.onFindings([xid(host(2))]);
    await a.idle();
    expect(driver.calls).toEqual([]);
    const [p] = a.pendingApprovals();
    expect(p).toMatchObject({ host: host(2) });
    expect(await a.approve(p.id, 'bob')).toMatchObject({ id: p.id, outcome: 'done', actor: 'bob' });
    expect(driver.out.has(host(2))).toBe(true);
    expect(await a.approve('act-nope', 'bob')).toMatchObject({
      outcome: 'refused',
      reason: 'no such pending action',
    });
  });

  it('never acts on old evidence, nor on a straggler from a job with too few hosts to compare', async () => {
    const { a, driver } = setup({ enabled: true, ...BUDGET, maxEvidenceAgeMs: 60_000 });
    a.onFindings([xid(host(3), { ts: NOW - 10 * 60_000 })]);
    for (const job of ['j1', 'j2', 'j3'])
      a.onFindings([xid(host(4), { type: 'straggler', action: 'watch', job, severity: 'warning' })]);
    await a.idle();
    expect(driver.calls).toEqual([]);
    expect(a.audit.map((e) => e.reason)).toEqual([
      'evidence is 10 min old (limit 1)',
      'the job has an unknown number of hosts, fewer than 4 to compare',
    ]);
  });

  it('never takes over or resumes a node a person drained', async () => {
    const driver = new MemoryDriver();
    driver.out.set(host(5), 'bad DIMM, ticket 4411');
    const { a, at } = setup({ enabled: true, ...BUDGET }, driver);
    a.onFindings([xid(host(5)), xid(host(6))]);
    await a.idle();
    expect(a.audit.find((e) => e.host === host(5))).toMatchObject({
      outcome: 'refused',
      reason: expect.stringMatching(/already out by a person/),
    });
    // rankwatch drained host 6; then a person re-drained it with their own reason.
    driver.out.set(host(6), 'reseating GPU 0');
    await repairAndVerify(a, host(6), at());
    await repairAndVerify(a, host(5), at());
    expect(driver.out.get(host(5))).toBe('bad DIMM, ticket 4411');
    expect(driver.out.get(host(6))).toBe('reseating GPU 0');
    expect(driver.calls.filter((c) => c.startsWith('uncordon'))).toEqual([]);
    expect(a.audit.at(-1)).toMatchObject({ verb: 'uncordon', outcome: 'refused', host: host(6) });
  });

  it('a failing drain is retried, then audited as failed and its budget slot freed', async () => {
    const driver = new MemoryDriver();
    driver.failNext = 5;
    const { a } = setup({ enabled: true, ...BUDGET }, driver);
    a.onFindings([xid(host(7))]);
    await a.idle();
    expect(a.audit.at(-1)).toMatchObject({ outcome: 'failed', attempts: 3, reason: 'slurmctld timed out' });
    expect(a.governor.nodesOut()).toEqual([]);
    driver.failNext = 1;
    a.onFindings([xid(host(8))]);
    await a.idle();
    expect(a.audit.at(-1)).toMatchObject({ outcome: 'done', attempts: 2 });
  });

  it('the rate limit holds across the hour', async () => {
    const { a, tick } = setup({ enabled: true, maxShare: 0.5, maxNodes: 30, perHour: 2 });
    for (const i of [10, 11, 12]) a.onFindings([xid(host(i), { ts: NOW + tick(1) })]);
    await a.idle();
    const byHost = Object.fromEntries(a.audit.map((e) => [e.host, e]));
    expect([10, 11, 12].map((i) => byHost[host(i)].outcome)).toEqual(['done', 'done', 'refused']);
    expect(byHost[host(12)].reason).toMatch(/^rate: 2 cordons in the last hour/);
  });
});

describe('small fleets and dry-run', () => {
  const gpu = (h: string) => ({
    v: 1 as const,
    kind: 'gpu' as const,
    ts: NOW,
    host: h,
    gpu: 0,
    sm_clock_mhz: 1980,
    throttle_reasons: 0,
  });

  it('on 8 hosts the default dry-run audits dry_run decisions (5% rounds to 0 nodes: one is the floor) with the budget arithmetic acting would use', async () => {
    // As `rankwatch up` builds it with no cordon flags: dry-run, default budget, fleet = hosts seen.
    const a = automationFrom(resolveOptions(CORDON_OPTIONS, {}, {}).values, undefined);
    a.onEvents(Array.from({ length: 8 }, (_, i) => gpu(host(i))));
    expect(a.governor.budget()).toEqual({ fleet: 8, nodes: 1, by: 'max_share', floored: true });
    a.onFindings([xid(host(0), { ts: Date.now() }), xid(host(1), { ts: Date.now() })]);
    await a.idle();
    expect(a.audit.map((e) => [e.host, e.outcome, e.reason])).toEqual([
      [host(0), 'dry_run', 'dry-run: automation is not enabled'],
      [
        host(1),
        'refused',
        'fleet budget: 1 of 8 nodes out, limit 1 (--cordon-max-share 0.05 of 8 rounds to 0: one node is the floor)',
      ],
    ]);
    expect(a.describe()).toMatch(/^repair loop: dry-run .* · driver: none · budget: 1 node\(s\) out at once/);
  });

  it('the share lowers the limit only while it allows a node or more, and never above --cordon-max-nodes', () => {
    const budget = (fleet: number, c: Partial<SafetyConfig>) =>
      new Automation({
        safety: safetyConfig({ enabled: true, perHour: 4, ...c }),
        fleetSize: () => fleet,
      }).governor.budget();
    expect(budget(16, { maxShare: 0.05, maxNodes: 4 })).toMatchObject({ nodes: 1, floored: true });
    expect(budget(100, { maxShare: 0.05, maxNodes: 4 })).toMatchObject({ nodes: 4, by: 'max_nodes' });
    expect(budget(60, { maxShare: 0.05, maxNodes: 4 })).toMatchObject({
      nodes: 3,
      by: 'max_share',
      floored: false,
    });
    expect(budget(8, { maxShare: 0.5, maxNodes: 1 })).toMatchObject({ nodes: 1, by: 'max_nodes' });
  });

  it('with a driver the fleet is the scheduler’s node count, read when the loop takes over', async () => {
    const driver = new MemoryDriver(Array.from({ length: 40 }, (_, i) => host(i)));
    const a = new Automation({
      driver,
      safety: safetyConfig({ enabled: true, maxShare: 0.1, maxNodes: 9, perHour: 9 }),
    });
    await a.takeOver(1);
    expect(a.governor.budget()).toMatchObject({ fleet: 40, nodes: 4 });
  });
});

describe('safety config', () => {
  it('refuses automation without a budget at start, naming each key', () => {
    expect(() => safetyConfig({ enabled: true })).toThrow(RankwatchError);
    expect(() => safetyConfig({ enabled: true })).toThrow(
      'cordon automation: enabled without a budget: set maxShare (--cordon-max-share), maxNodes (--cordon-max-nodes), perHour (--cordon-per-hour)',
    );
    expect(() => safetyConfig({ enabled: true, maxShare: 0.05 })).toThrow(/set maxNodes .*, perHour /);
    expect(() => safetyConfig({ enabled: true, ...BUDGET, maxShare: 2 })).toThrow(
      /maxShare: a share between 0 and 1/,
    );
    // Dry-run needs no budget of its own: the defaults apply.
    expect(safetyConfig({})).toMatchObject({ enabled: false, maxNodes: SAFETY_DEFAULTS.maxNodes });
  });
});

describe('rankwatch up with automation enabled and no budget', () => {
  it('refuses to start, in one line that names the flags', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rankwatch-nobudget-'));
    const r = spawnSync(
      process.execPath,
      [BIN, 'up', '--port', '0', '--data', join(dir, 'd'), '--cordon-enable'],
      {
        encoding: 'utf8',
        timeout: 60_000,
      },
    );
    rmSync(dir, { recursive: true, force: true });
    expect(r.status).toBe(2); // a flag left out: what was typed is wrong (README's rule)
    expect(r.stderr).toMatch(
      /^rankwatch up: RANKWATCH_ERR_CONFIG: cordon automation: enabled without a budget: set .*--cordon-per-hour/,
    );
  });
});
