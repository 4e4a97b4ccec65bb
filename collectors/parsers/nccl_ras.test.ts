import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { commHash, parseRas, rasFaultEvent } from './nccl_ras.js';

const fixture = (name: string) =>
  readFileSync(join(import.meta.dirname, 'fixtures', 'nccl-ras', name), 'utf8');
const seen = (name: string) =>
  parseRas(fixture(name)).status.observations.map((o) => [
    o.ras,
    o.comm,
    o.commRank,
    o.node,
    o.pid,
    o.gpu,
    o.ops,
    o.peersOps,
  ]);

describe('NCCL RAS text output', () => {
  it('2.26 (NVIDIA/nccl#1911): job summary, the table, and the two ranks ahead of 30 peers on AllGather', () => {
    const { status, problems } = parseRas(fixture('issue1911-2.26-allgather-mismatch.txt'));
    expect(problems).toEqual([]);
    expect([status.format, status.ncclVersion, status.nodes, status.processes, status.gpus]).toEqual([
      'text',
      '2.26.2',
      4,
      32,
      32,
    ]);
    expect(status.comms).toEqual([
      { group: 0, comms: 1, ranksPerComm: 32, status: 'RUNNING', errors: 'MISMATCH' },
    ]);
    expect(seen('issue1911-2.26-allgather-mismatch.txt')).toEqual([
      ['ahead', 'fa93daea854b060b', 12, '10.137.190.124', 323032, 4, 641, 640],
      ['ahead', 'fa93daea854b060b', 13, '10.137.190.124', 323033, 5, 641, 640],
    ]);
    expect(status.observations[0].message).toBe(
      '#0-0 (fa93daea854b060b) MISMATCH: Communicator ranks have different AllGather operation counts; 30 ranks have launched up to operation 640; Rank 12 -- GPU 4 managed by process 323032 on node 10.137.190.124',
    );
  });

  it('RAS "OK" while the job hangs (NVIDIA/nccl#1730): no observation, and the pasted watchdog lines are skipped', () => {
    const { status, problems } = parseRas(fixture('issue1730-2.26-ok-256.txt'));
    expect(problems).toEqual([]);
    expect(status.comms[0]).toMatchObject({ ranksPerComm: 256, status: 'RUNNING', errors: 'OK' });
    expect(status.observations).toEqual([]);
  });

  it('2.24 docs: six ranks behind by one operation, all named', () => {
    expect(seen('docs-2.24-mismatch-outliers.txt').map((o) => [o[0], o[2], o[6], o[7]])).toEqual(
      [0, 2, 3, 4, 5, 7].map((r) => ['behind', r, 6649, 6650]),
    );
    expect(parseRas(fixture('docs-2.24-mismatch-outliers.txt')).status.observations[0].opRaw).toBe(
      'collective',
    );
  });

  it('a status mismatch during tear-down (UNKNOWN / RUNNING / FINALIZE) is not a fault', () => {
    const { status, problems } = parseRas(fixture('docs-2.24-finalize-status.txt'));
    expect(problems).toEqual([]);
    expect(status.comms.map((c) => c.status)).toEqual(['FINALIZE', 'RUNNING', 'INIT']);
    expect(status.observations).toEqual([]);
  });

  it('a stopped process: unresponsive, its communicator’s missing rank, the timeouts; then dead', () => {
    expect(seen('docs-2.24-incomplete.txt')).toEqual([
      ['unresponsive', undefined, undefined, '172.16.64.213', 3487984, 5, undefined, undefined],
      ['missing', 'cf264af53edbe986', 21, undefined, undefined, undefined, undefined, undefined],
    ]);
    expect(parseRas(fixture('docs-2.24-incomplete.txt')).status.timeouts).toBe(2);
    expect(seen('docs-2.24-dead.txt').map((o) => o[0])).toEqual(['dead', 'missing']);
  });

  it('2.27 (NVIDIA/nccl#1762): a missing rank whose process is unresponsive is unresponsive; a garbage rank is refused', () => {
    const { status, problems } = parseRas(fixture('issue1762-2.27-incomplete-cut.txt'));
    expect([status.nodes, status.processes, status.gpus]).toEqual([2, 10, 10]);
    expect(seen('issue1762-2.27-incomplete-cut.txt')).toEqual([
      ['unresponsive', undefined, undefined, '10.4.109.13', 60004, 0, undefined, undefined],
      ['unresponsive', 'b3398875b8b2a063', 1, '10.4.109.13', 60004, 0, undefined, undefined],
    ]);
    expect(problems.map((p) => p.reason)).toEqual([
      '#2-0 (93d7000200000001) INCOMPLETE: rank 1057455228 in a communicator of 0 ranks: RAS output likely corrupt',
    ]);
  });

  it('CRLF, and the client’s stderr lines between the report’s, change nothing', () => {
    expect(seen('damaged-crlf-issue1911.txt')).toEqual(seen('issue1911-2.26-allgather-mismatch.txt'));
    expect(seen('damaged-interleaved-stderr.txt')).toEqual(seen('docs-2.24-incomplete.txt'));
  });

  it('errors, NVML indexes, a rank line cut short, a two-rank tie', () => {
    const text = [
      'Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors',
      '    #  in group  per comm  per node  per comm  in group',
      '    0         1         1         2         2         2   RUNNING  ERROR,MISMATCH',
      '',
      'Errors',
      '======',
      '',
      '#0-0 (00000000deadbeef) ERROR',
      '  Asynchronous error on 1 rank',
      '  Rank 1 reported Remote process error -- GPU 1 (NVML 5) managed by process 77 on node 10.0.0.2',
      '',
      '#0-0 (00000000deadbeef) INCOMPLETE',
      '  Missing communicator data from 1 rank',
      '  Rank 0 -- GPU 0 managed by',
      '',
      'Warnings',
      '========',
      '',
      '#0-0 (00000000deadbeef) MISMATCH',
      '  Communicator ranks have different AllReduce operation counts',
      '  Rank 0 has launched up to operation 9 -- GPU 0 managed by process 76 on node 10.0.0.2',
      '  Rank 1 has launched up to operation 8 -- GPU 1 (NVML 5) managed by process 77 on node 10.0.0.2',
    ].join('\n');
    const { status, problems } = parseRas(text);
    expect(problems.map((p) => p.reason)).toEqual([
      '#0-0 (00000000deadbeef) INCOMPLETE: a rank line cut short',
    ]);
    expect(
      status.observations.map((o) => [o.ras, o.commRank, o.gpu, o.nvmlGpu, o.code, o.ops, o.peersOps]),
    ).toEqual([
      ['comm_error', 1, 1, 5, 'Remote process error', undefined, undefined],
      ['ahead', 0, 0, undefined, undefined, 9, 8],
      ['behind', 1, 1, 5, undefined, 8, 9],
    ]);
  });
});

describe('NCCL RAS JSON output (2.28.7 on)', () => {
  it('the docs sample: rank 1 missing and unresponsive', () => {
    const { status, problems } = parseRas(fixture('docs-2.29-json-unresponsive.out'));
    expect(problems).toEqual([]);
    expect([status.format, status.ncclVersion, status.timeouts]).toEqual(['json', '2.29.1', 0]);
    expect(seen('docs-2.29-json-unresponsive.out')).toEqual([
      ['unresponsive', 'ae94423cfbb2ef4a', 1, '172.16.64.245', 1524345, 1, undefined, undefined],
    ]);
  });

  it('every rank behind its peers and every error is named', () => {
    const { status } = parseRas(fixture('derived-json-behind-async-error.out'));
    expect(status.observations.map((o) => [o.ras, o.commRank, o.code, o.opRaw, o.ops, o.peersOps])).toEqual([
      ['comm_error', 3, 'async_error 6 (ncclRemoteError)', undefined, undefined, undefined],
      ['behind', 2, undefined, 'AllReduce', 640, 641],
    ]);
  });

  it('a cut document, a null status (NVIDIA/nccl#2346) and an impossible rank are problems', () => {
    expect(parseRas(fixture('damaged-cut-docs-json.out')).problems[0].reason).toMatch(
      /^RAS JSON cut or garbled/,
    );
    const doc = JSON.parse(fixture('docs-2.29-json-unresponsive.out'));
    doc.communicators[0].ranks[0].status = null;
    doc.communicators[0].missing_ranks[0].rank = 7;
    const { status, problems } = parseRas(JSON.stringify(doc));
    expect(status.observations).toEqual([]);
    expect(problems.map((p) => p.reason)).toEqual([
      'communicator ae94423cfbb2ef4a (2 ranks): rank 7 cannot be one of its ranks: RAS output likely corrupt',
      'communicator ae94423cfbb2ef4a (2 ranks): rank 0 without a status',
    ]);
  });

  it('text and JSON name a communicator the same way', () => {
    expect(commHash('0xae94423cfbb2ef4a')).toBe('ae94423cfbb2ef4a');
    expect(commHash('0x1f')).toBe('000000000000001f');
  });
});

describe('fault events', () => {
  it('place what RAS names on its node (mapped to a host name when known) and validate', () => {
    const { status } = parseRas(fixture('docs-2.24-dead.txt'));
    const ctx = {
      host: 'collector-node',
      job: 'j',
      hostOf: (n: string) => (n === '172.16.64.213' ? 'gpu-213' : undefined),
    };
    const [dead, missing] = status.observations.map((o) => rasFaultEvent(o, 1_764_480_000_000, ctx));
    expect(dead).toMatchObject({
      host: 'gpu-213',
      node_addr: '172.16.64.213',
      gpu: 5,
      pid: 3487984,
      ras: 'dead',
      code: 'dead',
    });
    expect(missing).toMatchObject({ host: 'collector-node', host_source: 'collector', comm_rank: 21 });
    for (const e of [dead, missing]) expect(validateEvent(e)).toMatchObject({ ok: true });
  });
});
