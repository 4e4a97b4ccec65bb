import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ParseProblem } from '../parsers/problems.js';
import type { SourceDeps } from '../source.js';
import { ncclTests } from './nccl_tests.js';
import { ncclWatchdog } from './nccl_watchdog.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-nccl-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const fixture = (name: string) =>
  readFileSync(join(import.meta.dirname, '..', 'parsers', 'fixtures', name), 'utf8');

function deps() {
  const events: Record<string, unknown>[] = [];
  const problems: ParseProblem[] = [];
  const d: SourceDeps = {
    host: 'this-node',
    logger: { info: () => {}, warn: () => {} },
    now: () => 1_764_480_000_000,
    emit: (e) => events.push(...(e as Record<string, unknown>[])),
    parseProblems: (_s, p) => problems.push(...p),
    sourceError: (_s, err) => {
      throw err;
    },
    pciMap: new Map(),
  };
  return { d, events, problems };
}

const until = async (ok: () => boolean) => {
  for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 20));
};

describe('nccl sources on real output', () => {
  it('nccl_tests: a run cut off by the next run is kept incomplete, the next one complete; no parse problems', async () => {
    const p = join(dir, 'nccl-tests.log');
    // cluster-toolkit#3644's run (no summary), then soperator#428's run (srun -l labels) after it.
    writeFileSync(p, fixture('nccl-tests-k8s-timestamps.txt') + fixture('nccl-tests-srun-label.txt'));
    const { d, events, problems } = deps();
    const s = ncclTests.create(
      {
        type: 'nccl_tests',
        path: p,
        from: 'start',
        pollMs: 50,
        cutOffAfterMs: 300_000,
        test: 'all_reduce_perf',
      },
      d,
    );
    s.start();
    await until(() => events.length >= 2);
    await s.stop();
    expect(problems).toEqual([]);
    expect(events.map((e) => [e.kind, e.host, e.complete, (e.rows as unknown[]).length])).toEqual([
      ['check', 'this-node', false, 22],
      ['check', 'worker-0', true, 8],
    ]);
  });

  it('nccl_tests: a run still without its summary when the source stops is sent as cut off', async () => {
    const p = join(dir, 'cut.log');
    writeFileSync(p, fixture('nccl-tests-k8s-timestamps.txt'));
    const { d, events } = deps();
    const s = ncclTests.create(
      { type: 'nccl_tests', path: p, from: 'start', pollMs: 50, cutOffAfterMs: 300_000 },
      d,
    );
    s.start();
    await new Promise((r) => setTimeout(r, 200));
    expect(events).toEqual([]);
    await s.stop();
    expect(events.map((e) => [e.complete, e.ok])).toEqual([[false, false]]);
  });

  it('nccl_tests: #1453 (rank tags inside the rows, header cut off) is one check; its unreadable debug excerpt one problem', async () => {
    const tagged = join(dir, 'nccl-1453.log');
    const debug = join(dir, 'nccl-1453-debug.log');
    writeFileSync(tagged, fixture('nccl-tests-1453-tagged.txt'));
    writeFileSync(debug, fixture('nccl-tests-1453-debug.txt'));
    const a = deps();
    const b = deps();
    // Neither excerpt reaches a summary: the run ends when the file has been quiet for a second.
    const cfg = { type: 'nccl_tests' as const, from: 'start' as const, pollMs: 50, cutOffAfterMs: 1000 };
    const sa = ncclTests.create({ ...cfg, path: tagged }, a.d);
    const sb = ncclTests.create({ ...cfg, path: debug }, b.d);
    sa.start();
    sb.start();
    for (let i = 0; i < 1000 && (a.events.length === 0 || b.problems.length === 0); i++)
      await new Promise((r) => setTimeout(r, 20));
    await sa.stop();
    await sb.stop();
    expect(
      a.events.map((e) => [e.kind, e.host, e.complete, e.busbw_gbs, (e.rows as unknown[]).length]),
    ).toEqual([['check', 'this-node', false, 29.5, 20]]);
    expect(a.problems.map((p) => p.line)).toEqual([7, 18]);
    expect(b.events).toEqual([]);
    expect(b.problems).toHaveLength(1);
    expect(b.problems[0].reason).toMatch(
      /^no result row of this nccl-tests run could be read: numbers without/,
    );
  });

  it('nccl_watchdog: timeouts with their group, and the one whose group line never came on stop', async () => {
    const p = join(dir, 'train.log');
    writeFileSync(p, fixture('nccl-watchdog-pg-guid.log'));
    const { d, events, problems } = deps();
    const s = ncclWatchdog.create(
      { type: 'nccl_watchdog', path: p, from: 'start', pollMs: 50, settleMs: 60_000, job: 'sr' },
      d,
    );
    s.start();
    await until(() => events.length >= 2);
    await s.stop();
    expect(problems).toEqual([]);
    expect(events.map((e) => [e.rank, e.pg, e.host, e.job])).toEqual([
      [1, '0', 'this-node', 'sr'],
      [0, '0', 'this-node', 'sr'],
      [2, undefined, 'this-node', 'sr'],
    ]);
  });
});
