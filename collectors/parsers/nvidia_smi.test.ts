import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { DEFAULT_QUERY, type NvidiaSmiLine, NvidiaSmiParser, normalizePciBusId } from './nvidia_smi.js';

const lines = (name: string) =>
  readFileSync(join(import.meta.dirname, 'fixtures', name), 'utf8')
    .split('\n')
    .filter(Boolean);
const NOW = 1_764_480_000_000;

function run(name: string, query?: string[]): NvidiaSmiLine[] {
  const p = new NvidiaSmiParser('gpu-0017', query);
  return lines(name).map((l) => p.push(l, NOW));
}

describe('nvidia-smi CSV → gpu events', () => {
  it('reads a header with units, values with units, [N/A] and [Not Supported], hex reasons', () => {
    const out = run('nvidia-smi-units.csv');
    const events = out.flatMap((o) => (o.event ? [o.event] : []));
    expect(out.filter((o) => o.problem)).toEqual([]);
    expect(events).toHaveLength(3);
    for (const e of events) expect(validateEvent(e).ok).toBe(true);
    expect(events[0]).toMatchObject({
      host: 'gpu-0017',
      gpu: 0,
      sm_clock_mhz: 1980,
      max_sm_clock_mhz: 1980,
      power_w: 612.43,
      temp_c: 61,
      util_pct: 100,
      throttle_reasons: 0,
      ecc_sbe: 0,
      ecc_dbe: 0,
      uuid: 'GPU-5f1c6a3e-9d1b-4c2e-8f7a-0a1b2c3d4e50',
    });
    expect(events[0].ts).toBe(new Date(2026, 10, 30, 5, 12, 1, 123).getTime());
    expect(events[1]).toMatchObject({ gpu: 1, sm_clock_mhz: 1395, throttle_reasons: 0x60 });
    expect(events[1]).not.toHaveProperty('ecc_dbe');
    expect(events[2]).not.toHaveProperty('power_w');
    expect(out.map((o) => o.pci?.busId)).toEqual([undefined, '0000:18:00', '0000:2a:00', '0000:3b:00']);
  });

  it('reads noheader,nounits output with the query fields given', () => {
    const events = run('nvidia-smi-nounits-noheader.csv', DEFAULT_QUERY).map((o) => o.event);
    expect(events.map((e) => [e?.gpu, e?.sm_clock_mhz, e?.throttle_reasons, e?.ecc_sbe])).toEqual([
      [0, 1410, 1, 0],
      [1, 1095, 0x88, 2],
    ]);
  });

  it('accepts the older clocks_throttle_reasons name and a repeated header', () => {
    const events = run('nvidia-smi-legacy.csv').flatMap((o) => (o.event ? [o.event] : []));
    expect(events.map((e) => [e.gpu, e.sm_clock_mhz, e.throttle_reasons, e.ts])).toEqual([
      [0, 1410, 0, NOW],
      [1, 1200, 8, NOW],
      [0, 1410, 4, NOW],
    ]);
  });

  it('reports truncated lines, NVML errors and bad bitmasks by line number and keeps going', () => {
    const out = run('nvidia-smi-garbage.csv');
    expect(out.flatMap((o) => (o.problem ? [o.problem.line] : []))).toEqual([3, 4, 5, 6]);
    expect(out.flatMap((o) => (o.event ? [o.event.gpu] : []))).toEqual([0, 4]);
  });

  it('data before any header is a problem, not a crash', () => {
    const p = new NvidiaSmiParser('h');
    expect(p.push('0, 1980, 0x0', NOW).problem?.reason).toMatch(/before any header/);
  });

  it('normalises PCI bus ids from nvidia-smi and the kernel to one form', () => {
    expect(normalizePciBusId('00000000:3B:00.0')).toBe('0000:3b:00');
    expect(normalizePciBusId('PCI:0000:3b:00')).toBe('0000:3b:00');
    expect(normalizePciBusId('0000:3b:00.0')).toBe('0000:3b:00');
  });
});

describe('nvidia-smi CSV as shipped', () => {
  const rows = lines('nvidia-smi-nounits-noheader.csv');
  const parse = (ls: string[]) => {
    const p = new NvidiaSmiParser('gpu-0017', DEFAULT_QUERY);
    return ls.map((l) => p.push(l, NOW));
  };

  it('reads rows behind kubectl --timestamps stamps, with CRLF and tabs, like the plain rows', () => {
    const plain = parse(rows);
    const shipped = parse(rows.map((r) => `2026-11-30T05:12:02.000000001Z ${r.replaceAll(', ', ',\t')}\r`));
    expect(shipped.filter((o) => o.problem)).toEqual([]);
    expect(shipped.map((o) => o.event?.throttle_reasons)).toEqual(
      plain.map((o) => o.event?.throttle_reasons),
    );
    expect(shipped.map((o) => o.event?.sm_clock_mhz)).toEqual([1410, 1095]);
  });

  it('counts a truncated last row once, with its reason', () => {
    const out = parse([rows[0], rows[1].slice(0, 40)]);
    expect(out.filter((o) => o.problem).map((o) => o.problem?.reason)).toEqual([
      'expected 13 columns, got 3',
    ]);
  });
});
