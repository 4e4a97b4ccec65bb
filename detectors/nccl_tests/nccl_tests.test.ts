import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ncclTestCheck, parseNcclTests } from '../../collectors/parsers/nccl_tests.js';
import type { CheckEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { validateEvent } from '../../schema/validate.js';
import { DetectorRunner } from '../runner.js';

const fixtures = join(import.meta.dirname, '../../collectors/parsers/fixtures');
const text = (name: string) => readFileSync(join(fixtures, name), 'utf8');
const T0 = 1_764_480_000_000;

/** A real run (parsed from a public fixture) as it would come from `hosts`, bus bandwidth scaled. */
function run(name: string, o: { ts: number; hosts: string[]; scale?: number; edit?: (t: string) => string }) {
  const r = parseNcclTests((o.edit ?? ((t) => t))(text(name)));
  const c = ncclTestCheck(r, { ts: o.ts, test: 'alltoall_perf', host: o.hosts[0] })!;
  const rows = (c.rows as { busbw_gbs: number }[]).map((x) => ({
    ...x,
    busbw_gbs: x.busbw_gbs * (o.scale ?? 1),
  }));
  const e = { ...c, host: o.hosts[0], hosts: o.hosts, rows } as CheckEvent;
  expect(validateEvent(e).ok).toBe(true);
  return e;
}

function judge(events: CheckEvent[], config = {}): Finding[] {
  const runner = new DetectorRunner(config);
  for (const e of events) runner.push(e);
  return runner.take().findings;
}

describe('nccl-tests runs judged', () => {
  it('#wrong > 0 is critical corrupted data on the run’s host; a clean run there resolves it', () => {
    const bad = run('nccl-tests-wrong.txt', { ts: T0, hosts: ['GENOA-01'] });
    const clean = run('nccl-tests-wrong.txt', {
      ts: T0 + 3_600_000,
      hosts: ['GENOA-01'],
      edit: (t) => t.replace(/ {5}12 {5}/, '      0     ').replace('12 FAILED', '0 OK'),
    });
    const f = judge([bad, clean]).filter((x) => x.type === 'nccl_data_corruption');
    expect(f.map((x) => [x.state, x.host, x.severity])).toEqual([
      ['open', 'GENOA-01', 'critical'],
      ['resolved', 'GENOA-01', 'critical'],
    ]);
    expect(f[0].evidence).toMatchObject({ wrong: 12, out_of_bounds: 12, sizes_bytes: [1048576] });
    expect(f[0].action).toBe('cordon');
    // On two hosts the run cannot say which one corrupts: watched, not cordoned, both named.
    const pair = judge([run('nccl-tests-wrong.txt', { ts: T0, hosts: ['a', 'b'] })]);
    expect(pair.map((x) => [x.type, x.host, x.peer_host, x.severity, x.action])).toEqual([
      ['nccl_data_corruption', 'a', 'b', 'critical', 'watch'],
    ]);
  });

  it('a collapse between adjacent sizes names both sizes and figures, on a run cut off before its summary', () => {
    // cluster-toolkit#3644's rows with the 256 MiB row's busbw cut to a quarter.
    const e = run('nccl-tests-k8s-timestamps.txt', {
      ts: T0,
      hosts: ['gke-a', 'gke-b'],
      edit: (t) => t.replace('141.77', '35.10'),
    });
    const f = judge([e]).filter((x) => x.type === 'nccl_busbw_collapse');
    expect(f).toHaveLength(1);
    expect(f[0]).toMatchObject({ host: 'gke-a', peer_host: 'gke-b', state: 'open' });
    expect(f[0].evidence).toMatchObject({
      from_bytes: 134217728,
      to_bytes: 268435456,
      from_busbw_gbs: 113.66,
      to_busbw_gbs: 35.1,
      complete: false,
    });
    // The unedited run has no collapse anywhere (bandwidth grows with size).
    expect(judge([run('nccl-tests-k8s-timestamps.txt', { ts: T0, hosts: ['gke-a'] })])).toEqual([]);
  });

  it('NVIDIA/nccl#1453 as printed (rank tags in the rows, no header): the collapse past 32 MiB is found', () => {
    const e = run('nccl-tests-1453-tagged.txt', { ts: T0, hosts: ['h100clust-worker-1'] });
    const f = judge([e]).filter((x) => x.type === 'nccl_busbw_collapse');
    expect(f).toHaveLength(1);
    expect(f[0].evidence).toMatchObject({
      from_bytes: 33554432,
      to_bytes: 67108864,
      from_busbw_gbs: 29.5,
      to_busbw_gbs: 5.27,
      in_place: false,
      complete: false,
    });
  });

  it('bus bandwidth below the best known run of the same test and host count, per band, with both figures', () => {
    const good = run('nccl-tests-k8s-timestamps.txt', { ts: T0, hosts: ['a', 'b'] });
    const slow = run('nccl-tests-k8s-timestamps.txt', { ts: T0 + 60_000, hosts: ['c', 'd'], scale: 0.5 });
    const f = judge([good, slow]).filter((x) => x.type === 'nccl_busbw_low');
    expect(f).toHaveLength(1);
    expect(f[0]).toMatchObject({ host: 'c', peer_host: 'd', severity: 'warning' });
    expect(f[0].evidence.bands).toEqual([
      expect.objectContaining({
        band: 'medium',
        measured_gbs: 32.78,
        expected_gbs: 65.56,
        reference: 'best_known',
      }),
      expect.objectContaining({
        band: 'large',
        measured_gbs: 92.9,
        expected_gbs: 185.8,
        reference: 'best_known',
      }),
    ]);
    // A first run has nothing to be compared with; the slower one first is not judged against the faster later one.
    expect(judge([slow, good]).filter((x) => x.type === 'nccl_busbw_low')).toEqual([]);
    // Nor is a run on another GPU model (as its rank lines name it).
    const h100 = { ...good, gpu_name: 'NVIDIA H100 80GB HBM3' } as CheckEvent;
    const a100 = { ...slow, gpu_name: 'NVIDIA A100-SXM4-80GB' } as CheckEvent;
    expect(judge([h100, a100]).filter((x) => x.type === 'nccl_busbw_low')).toEqual([]);
  });

  it('a configured expectation judges the large sizes from the first run', () => {
    const e = run('nccl-tests-k8s-timestamps.txt', { ts: T0, hosts: ['a'] });
    const f = judge([e], { ncclChecks: { ...defaults(), expectedGbs: { alltoall_perf: 250 } } });
    expect(f.map((x) => [x.type, x.host, x.evidence.bands])).toEqual([
      [
        'nccl_busbw_low',
        'a',
        [
          expect.objectContaining({
            band: 'large',
            measured_gbs: 185.8,
            expected_gbs: 250,
            reference: 'configured',
          }),
        ],
      ],
    ]);
  });

  it('pairwise runs: the host common to the slow pairs is named, not its peers', () => {
    const pairs: [string, string, number][] = [
      ['n1', 'n2', 1],
      ['n1', 'n3', 1],
      ['n2', 'n3', 1],
      ['n1', 'n4', 0.4],
      ['n2', 'n4', 0.45],
      ['n3', 'n4', 0.42],
    ];
    const events = pairs.map(([a, b, scale], i) =>
      run('nccl-tests-k8s-timestamps.txt', { ts: T0 + i * 60_000, hosts: [a, b], scale }),
    );
    const f = judge(events).filter((x) => x.type === 'nccl_slow_host');
    expect(f.map((x) => [x.state, x.host])).toEqual([
      ['open', 'n4'],
      ['update', 'n4'],
    ]);
    expect(f[0].evidence).toMatchObject({ best_pair_gbs: 185.8 });
    expect((f[0].evidence.slow_pairs as { peer: string }[]).map((p) => p.peer)).toEqual(['n1', 'n2']);
    expect((f[1].evidence.slow_pairs as { peer: string }[]).map((p) => p.peer)).toEqual(['n1', 'n2', 'n3']);
    // Each slow pair is also low on its own, named by its hosts.
    const low = judge(events).filter((x) => x.type === 'nccl_busbw_low');
    expect(low.map((x) => [x.host, x.peer_host])).toEqual([
      ['n1', 'n4'],
      ['n2', 'n4'],
      ['n3', 'n4'],
    ]);
  });

  it('clean real runs produce no finding', () => {
    const events = [
      run('nccl-tests-k8s-timestamps.txt', { ts: T0, hosts: ['a', 'b'] }),
      run('nccl-tests-k8s-timestamps.txt', { ts: T0 + 1, hosts: ['c', 'd'], scale: 0.95 }),
    ];
    expect(judge(events)).toEqual([]);
  });
});

function defaults() {
  return {
    lowRatio: 0.8,
    collapseRatio: 0.5,
    minBytes: 1 << 20,
    collapseMinGbs: 1,
    expectedGbs: {},
    minSlowPairs: 2,
  };
}
