/**
 * `sinfo --noheader --Node --format '%N|%T|%E'` and `scontrol show node -o` as Slurm 22.05 printed
 * them (fixtures/, sources in fixtures/sinfo-22.05.md), and damaged: CRLF, cut lines, a node listed once per
 * partition, state suffixes from the sinfo man page's NODE STATE CODES.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseShowNode, parseSinfoNodes } from './slurm.js';

const real = readFileSync(join(import.meta.dirname, 'fixtures', 'sinfo-22.05.txt'), 'utf8');

describe('sinfo node list', () => {
  it('reads each node, whether it is out and by whose hand, the reason whole (a | inside kept)', () => {
    expect(parseSinfoNodes(real)).toEqual([
      {
        host: 'gpu-0001',
        out: true,
        byRankwatch: true,
        reason: 'rankwatch: xid xid-abc: gpu-0001/2: XID 79 | pipe',
      },
      { host: 'gpu-0002', out: true, byRankwatch: false, reason: 'bad DIMM, ticket 4411' },
      {
        host: 'gpu-0003',
        out: true,
        byRankwatch: true,
        reason: 'rankwatch: ecc ecc-7: gpu-0003/1: uncorrectable ECC',
      },
      { host: 'gpu-0004', out: false, byRankwatch: false, reason: undefined },
    ]);
  });

  it('CRLF and blank lines read the same', () => {
    expect(parseSinfoNodes(`\r\n${real.replace(/\n/g, '\r\n')}\r\n`)).toEqual(parseSinfoNodes(real));
  });

  it('a node in two partitions is one node; suffixes (* not responding, ~ powered off) keep the state', () => {
    const text = [
      'gpu-0001|drained*|rankwatch: xid x-1: XID 79',
      'gpu-0001|drained*|rankwatch: xid x-1: XID 79',
      'gpu-0005|idle~|none',
      'gpu-0006|down*|Not responding',
      'gpu-0007|mixed|none',
    ].join('\n');
    expect(parseSinfoNodes(text).map((n) => [n.host, n.out, n.byRankwatch])).toEqual([
      ['gpu-0001', true, true],
      ['gpu-0005', false, false],
      ['gpu-0006', true, false],
      ['gpu-0007', false, false],
    ]);
  });

  it('a cut listing: a line without its state is skipped, one cut inside its reason keeps what is there', () => {
    const cut = real.slice(0, real.indexOf('gpu-0003|drain') + 'gpu-0003|draining|rankwatch: ecc'.length);
    expect(parseSinfoNodes(`${cut}\ngpu-0009`)).toEqual([
      expect.objectContaining({ host: 'gpu-0001' }),
      expect.objectContaining({ host: 'gpu-0002' }),
      { host: 'gpu-0003', out: true, byRankwatch: true, reason: 'rankwatch: ecc' },
    ]);
  });

  it('`scontrol show node -o` reads the same state and reason', () => {
    const show = readFileSync(join(import.meta.dirname, 'fixtures', 'scontrol-show-node-22.05.txt'), 'utf8');
    expect(parseShowNode(show)).toEqual({
      out: true,
      byRankwatch: true,
      reason:
        'rankwatch: xid xid-d329ff7ddc8b2040: gpu-0001/0: XID 79 (GPU has fallen off the bus); recovery: reboot_node.',
    });
  });
});
