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

  it('a clock event counted in the window sets its reason bit, from the first scrape on (dcgm-exporter#261)', () => {
    const state: DcgmState = new Map();
    const text = fixture('dcgm-exp-clock-events.prom');
    // As served, with CRLF, and with the count rows before the clock row (a scrape's order is free).
    const lines = text.split('\n').filter(Boolean);
    const reordered = `${[...lines.filter((l) => l.includes('CLOCK_EVENTS')), ...lines.filter((l) => !l.includes('CLOCK_EVENTS'))].join('\n')}\n`;
    for (const variant of [text, text.replaceAll('\n', '\r\n'), reordered]) {
      const r = dcgmToEvents(variant, TS, MAP, new Map());
      expect(r.problems).toEqual([]);
      expect(r.events).toHaveLength(1);
      const gpu = r.events[0];
      expect(validateEvent(gpu).ok).toBe(true);
      // sw_thermal 0x20 | hw_thermal 0x40; gpu_idle is a state, not an event: not set from a window.
      expect(gpu).toMatchObject({
        kind: 'gpu',
        host: 'home',
        gpu: 0,
        sm_clock_mhz: 1065,
        throttle_reasons: 0x60,
        clock_event_reasons: 0x60,
        clock_event_window_ms: 300_000,
        throttle_reasons_from: 'clock_event_counts',
      });
      expect(gpu).not.toHaveProperty('throttle_reasons_unknown');
    }
    // The window still holds them on the next scrape: the bits stay, not "unknown".
    dcgmToEvents(text, TS, MAP, state);
    expect(dcgmToEvents(text, TS + 30_000, MAP, state).events[0]).toMatchObject({ throttle_reasons: 0x60 });
    // The exporter's no-event row: nothing counted in the window is a known zero.
    const none = dcgmToEvents(fixture('dcgm-exp-counts-before.prom'), TS + 400_000, MAP, state);
    expect(none.events[0]).toMatchObject({ throttle_reasons: 0, clock_event_reasons: 0 });
    expect(none.events[0]).not.toHaveProperty('throttle_reasons_unknown');
  });

  it('reads the older name and label of the count (DCGM_FI_EXP_CLOCK_THROTTLE_REASONS_COUNT, dcgm-exporter#254)', () => {
    const r = dcgmToEvents(fixture('dcgm-exp-throttle-reasons.prom'), TS, MAP, new Map());
    expect(r.problems).toEqual([]);
    expect(r.events[0]).toMatchObject({ host: 'localhost', throttle_reasons: 0x60 });
  });

  it('lets the reason bitmask field win over the window; counted bits stay beside it', () => {
    const text = `${fixture('dcgm-k8s.prom')}DCGM_EXP_CLOCK_EVENTS_COUNT{gpu="0",Hostname="gpu-0017",clock_event="power_cap",window_size_in_ms="300000"} 4\n`;
    const r = dcgmToEvents(text, TS, MAP, new Map());
    const gpu0 = r.events.find((e) => e.kind === 'gpu' && e.gpu === 0);
    expect(gpu0).toMatchObject({ throttle_reasons: 0, clock_event_reasons: 0x4 });
    expect(gpu0).not.toHaveProperty('throttle_reasons_from');
  });

  it('an XID count in a scrape without an SM clock is a fault with its code, once (dcgm-exporter#239)', () => {
    const state: DcgmState = new Map();
    const text = fixture('dcgm-exp-xid-active.prom');
    const first = dcgmToEvents(text, TS, MAP, state);
    // No clock, but nothing else of the GPU either: no gpu event owed, no problem.
    expect(first.problems).toEqual([]);
    expect(first.events).toHaveLength(1);
    expect(first.events[0]).toMatchObject({
      kind: 'fault',
      host: 'workstation',
      gpu: 0,
      uuid: 'GPU-b9f9e81b-bee7-34bc-af17-132ef6592740',
      source: 'xid',
      code: 42,
      count: 1,
      window_ms: 300_000,
    });
    expect(validateEvent(first.events[0]).ok).toBe(true);
    // The same XID still in the window: not a new fault, scrape after scrape.
    for (let i = 1; i <= 3; i++) expect(dcgmToEvents(text, TS + i * 30_000, MAP, state).events).toEqual([]);
    // The count grows: the new ones, not all of them again.
    const grown = dcgmToEvents(text.replace(/\} 1\n$/, '} 3\n'), TS + 120_000, MAP, state);
    expect(grown.events.map((e) => [e.code, e.count])).toEqual([[42, 2]]);
    // It falls as old ones leave the window, then the same count again is not new.
    expect(dcgmToEvents(text, TS + 400_000, MAP, state).events).toEqual([]);
    expect(dcgmToEvents(text, TS + 430_000, MAP, state).events).toEqual([]);
    // CRLF and a body cut mid-number: the same fault, and a refused scrape.
    expect(dcgmToEvents(text.replaceAll('\n', '\r\n'), TS, MAP, new Map()).events[0]).toMatchObject({
      code: 42,
    });
    const cut = dcgmToEvents(text.slice(0, -3), TS, MAP, new Map());
    expect(cut.events).toEqual([]);
    expect(cut.problems[0].reason).toMatch(/cut short/);
  });

  it('an XID that leaves the window and comes back is new; one GPU per host keeps its own counts', () => {
    const state: DcgmState = new Map();
    dcgmToEvents(fixture('dcgm-exp-counts-before.prom'), TS, MAP, state);
    const after = dcgmToEvents(fixture('dcgm-exp-counts-after.prom'), TS + 30_000, MAP, state);
    expect(after.problems).toEqual([]);
    expect(after.events.filter((e) => e.kind === 'fault').map((e) => [e.host, e.code, e.count])).toEqual([
      ['home', 42, 1],
    ]);
    expect(after.events.find((e) => e.kind === 'gpu')).toMatchObject({
      sm_clock_mhz: 1065,
      throttle_reasons: 0x60,
    });
    expect(
      dcgmToEvents(fixture('dcgm-exp-counts-after.prom'), TS + 60_000, MAP, state).events.filter(
        (e) => e.kind === 'fault',
      ),
    ).toEqual([]);
    // The exporter prints the no-event row again (the XID left the window), then the XID recurs.
    dcgmToEvents(fixture('dcgm-exp-counts-before.prom'), TS + 400_000, MAP, state);
    const repeat = dcgmToEvents(fixture('dcgm-exp-counts-after.prom'), TS + 430_000, MAP, state);
    expect(repeat.events.filter((e) => e.kind === 'fault').map((e) => e.code)).toEqual([42]);
    // Two hosts in one body (a federating proxy): each GPU its own series.
    const both = dcgmToEvents(
      fixture('dcgm-exp-xid-active.prom') +
        fixture('dcgm-exp-xid-active.prom').replaceAll('workstation', 'ws-2'),
      TS,
      MAP,
      new Map(),
    );
    expect(both.events.map((e) => [e.host, e.code])).toEqual([
      ['workstation', 42],
      ['ws-2', 42],
    ]);
  });

  it('a lifetime count (no window) is read by its rise, the first scrape being the baseline', () => {
    const total = (n: number) =>
      `${fixture('dcgm-exp-xid-active.prom')
        .replace('DCGM_FI_DEV_XID_ERRORS_ACTIVE', 'DCGM_EXP_XID_ERRORS_TOTAL')
        .replace(',window_size_in_ms="300000"', '')
        .replace(/\} 1\n$/, `} ${n}\n`)}`;
    const state: DcgmState = new Map();
    expect(dcgmToEvents(total(5), TS, MAP, state).events).toEqual([]);
    expect(dcgmToEvents(total(5), TS + 30_000, MAP, state).events).toEqual([]);
    const rose = dcgmToEvents(total(7), TS + 60_000, MAP, state).events;
    expect(rose.map((e) => [e.code, e.count])).toEqual([[42, 2]]);
    expect(rose[0]).not.toHaveProperty('window_ms');
  });
});
