import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { type DcgmState, dcgmToEvents, isBlank } from './dcgm.js';

const fixture = (name: string) => readFileSync(join(import.meta.dirname, 'fixtures', name), 'utf8');
const TS = 1_764_480_000_000;

describe('dcgm-exporter text → gpu and fault events', () => {
  it('reads the current field names, Hostname, UUID and Kubernetes labels', () => {
    const r = dcgmToEvents(fixture('dcgm-k8s.prom'), TS, { host: 'fallback' }, new Map());
    expect(r.problems).toEqual([]);
    const gpus = r.events.filter((e) => e.kind === 'gpu');
    expect(gpus).toHaveLength(2);
    for (const e of gpus) expect(validateEvent(e).ok).toBe(true);
    expect(gpus[0]).toMatchObject({
      host: 'gpu-0017',
      gpu: 0,
      uuid: 'GPU-5f1c6a3e-9d1b-4c2e-8f7a-0a1b2c3d4e50',
      job: 'llama-70b',
      pod: 'llama-70b-worker-3',
      namespace: 'llm',
      sm_clock_mhz: 1980,
      mem_clock_mhz: 2619,
      temp_c: 61,
      power_w: 612.437,
      util_pct: 100,
      throttle_reasons: 0,
      ecc_dbe: 0,
    });
    expect(gpus[0].tensor_active_pct).toBeCloseTo(41.2345, 3);
    // GPU 1: HW + SW thermal (0x60), blank utilisation, sentinel remapped-row count.
    expect(gpus[1]).toMatchObject({
      gpu: 1,
      throttle_reasons: 96,
      remapped_rows_uncorrectable: 2,
      ecc_dbe: 1,
    });
    expect(gpus[1]).not.toHaveProperty('util_pct');
    expect(gpus[1]).not.toHaveProperty('remapped_rows_correctable');
  });

  it('reads the older throttle field, lowercase hostname and gpu_uuid; drops 32-bit and fp64 blanks', () => {
    const r = dcgmToEvents(
      fixture('dcgm-legacy.prom'),
      TS,
      { host: 'fallback', job: 'fixed-job' },
      new Map(),
    );
    const gpus = r.events.filter((e) => e.kind === 'gpu');
    expect(gpus.map((g) => [g.host, g.gpu, g.uuid, g.throttle_reasons, g.job])).toEqual([
      ['dgx-a-04', 0, 'GPU-aaaaaaaa-0000-0000-0000-000000000000', 4, 'fixed-job'],
      ['dgx-a-04', 1, 'GPU-aaaaaaaa-0000-0000-0000-000000000001', 8, 'fixed-job'],
    ]);
    expect(gpus[0]).not.toHaveProperty('power_w');
    expect(gpus[1]).not.toHaveProperty('temp_c');
    expect(gpus[0].ecc_sbe).toBe(3);
  });

  it('turns a change of the last XID into one fault, never the baseline or a repeat', () => {
    const state: DcgmState = new Map();
    const text = fixture('dcgm-legacy.prom');
    expect(dcgmToEvents(text, TS, { host: 'h' }, state).events.filter((e) => e.kind === 'fault')).toEqual([]);
    const next = text.replace(/(XID_ERRORS\{gpu="0"[^}]*\}) 0/, '$1 79');
    const faults = dcgmToEvents(next, TS + 1000, { host: 'h' }, state).events.filter(
      (e) => e.kind === 'fault',
    );
    expect(faults).toHaveLength(1);
    expect(faults[0]).toMatchObject({ kind: 'fault', host: 'dgx-a-04', gpu: 0, source: 'xid', code: 79 });
    expect(validateEvent(faults[0]).ok).toBe(true);
    expect(
      dcgmToEvents(next, TS + 2000, { host: 'h' }, state).events.filter((e) => e.kind === 'fault'),
    ).toEqual([]);
  });

  it('counts truncated lines and garbage, keeps the good samples, never throws', () => {
    const r = dcgmToEvents(fixture('dcgm-garbage.prom'), TS, { host: 'node-x' }, new Map());
    expect(r.problems.map((p) => p.line).filter((l) => l > 0)).toEqual([3, 4, 7]);
    expect(r.problems.some((p) => /no gpu index/.test(p.reason))).toBe(true);
    const gpus = r.events.filter((e) => e.kind === 'gpu');
    expect(gpus).toHaveLength(1);
    expect(gpus[0]).toMatchObject({
      host: 'node-1',
      gpu: 0,
      sm_clock_mhz: 1755,
      throttle_reasons_unknown: true,
    });
  });

  it('recognises DCGM blank sentinels', () => {
    expect(isBlank(Number('9223372036854775794'))).toBe(true);
    expect(isBlank(2 ** 63 - 100)).toBe(true);
    expect(isBlank(2147483632)).toBe(true);
    expect(isBlank(140737488355329)).toBe(true);
    expect(isBlank(undefined)).toBe(true);
    expect(isBlank(1980)).toBe(false);
    expect(isBlank(0)).toBe(false);
  });
});

describe('dcgm-exporter as sites configure it', () => {
  const MAP = { host: 'fallback' };

  it('reads the README scrape (spaces between labels), also with CRLF and tabs', () => {
    const text = fixture('dcgm-readme.prom');
    for (const variant of [text, text.replaceAll('\n', '\r\n'), text.replaceAll(', ', ',\t')]) {
      const r = dcgmToEvents(variant, TS, MAP, new Map());
      expect(r.problems).toEqual([]);
      expect(r.events).toHaveLength(1);
      expect(r.events[0]).toMatchObject({ gpu: 0, sm_clock_mhz: 139, mem_clock_mhz: 405 });
      expect(r.events[0]).not.toHaveProperty('mem_temp_c');
    }
  });

  it('refuses a scrape cut mid-number instead of reading 139 MHz as 1', () => {
    const text = fixture('dcgm-readme.prom');
    const cut = text.slice(0, text.indexOf('} 139') + 3);
    expect(cut.endsWith('} 1')).toBe(true);
    const r = dcgmToEvents(cut, TS, MAP, new Map());
    expect(r.events).toEqual([]);
    expect(r.problems).toHaveLength(1);
    expect(r.problems[0].reason).toMatch(/cut short/);
  });

  it('turns a rise of the XID and clock-event counts into one fault and reason bits, once', () => {
    const state: DcgmState = new Map();
    const before = dcgmToEvents(fixture('dcgm-exp-counts-before.prom'), TS, MAP, state);
    expect(before.problems).toEqual([]);
    expect(before.events.filter((e) => e.kind === 'fault')).toEqual([]);
    expect(before.events[0]).toMatchObject({ host: 'home', gpu: 0, throttle_reasons_unknown: true });
    // Unknown DCGM fields are counted apart, never as parse problems.
    expect(before.ignored).toEqual({ DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION: 1 });

    const after = dcgmToEvents(fixture('dcgm-exp-counts-after.prom'), TS + 30_000, MAP, state);
    expect(after.problems).toEqual([]);
    const faults = after.events.filter((e) => e.kind === 'fault');
    expect(faults).toHaveLength(1);
    expect(faults[0]).toMatchObject({ host: 'home', gpu: 0, source: 'xid', code: 42, count: 1 });
    expect(validateEvent(faults[0]).ok).toBe(true);
    const gpu = after.events.find((e) => e.kind === 'gpu');
    // gpu_idle 0x1 | sw_thermal 0x20 | hw_thermal 0x40
    expect(gpu).toMatchObject({ sm_clock_mhz: 1065, throttle_reasons: 0x61 });
    expect(gpu).not.toHaveProperty('throttle_reasons_unknown');

    // The same counts on the next scrape are not new events.
    const again = dcgmToEvents(fixture('dcgm-exp-counts-after.prom'), TS + 60_000, MAP, state);
    expect(again.events.filter((e) => e.kind === 'fault')).toEqual([]);
    expect(again.events[0]).toMatchObject({ throttle_reasons: 0, throttle_reasons_unknown: true });

    // The XID leaves the window (the exporter prints the no-event row again), then happens again:
    // the same count of 1 is a new event.
    dcgmToEvents(fixture('dcgm-exp-counts-before.prom'), TS + 400_000, MAP, state);
    const repeat = dcgmToEvents(fixture('dcgm-exp-counts-after.prom'), TS + 430_000, MAP, state);
    expect(repeat.events.filter((e) => e.kind === 'fault').map((e) => e.code)).toEqual([42]);
  });

  it('takes counts already there at the first scrape as the baseline (a restart re-reports nothing)', () => {
    const r = dcgmToEvents(fixture('dcgm-exp-counts-after.prom'), TS, MAP, new Map());
    expect(r.events.filter((e) => e.kind === 'fault')).toEqual([]);
  });
});
