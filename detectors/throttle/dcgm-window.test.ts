/**
 * The throttle detector on gpu events whose reasons come from dcgm-exporter's windowed clock-event
 * counts (collectors/parsers/fixtures/dcgm-exp-clock-events.prom, dcgm-exporter PR #261), scraped
 * once a second through the real parser: thermal events counted in the window explain a clock drop;
 * a power cap counted alone, or thermal events while the clock is at its maximum, do not.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type DcgmState, dcgmToEvents } from '../../collectors/parsers/dcgm.js';
import type { Finding } from '../../schema/finding.js';
import { DetectorRunner } from '../runner.js';

const FIXTURES = join(import.meta.dirname, '..', '..', 'collectors', 'parsers', 'fixtures');
const THERMAL = readFileSync(join(FIXTURES, 'dcgm-exp-clock-events.prom'), 'utf8');
const MAX_MHZ = 1425;
const T0 = 1_764_480_000_000;

/** The #261 scrape at `mhz`, with its counted reasons replaced by `events` (name → count). */
function scrape(mhz: number, events?: Record<string, number>): string {
  let text = THERMAL.replace(/\} 1065\n/, `} ${mhz}\n`);
  if (events) {
    const row = THERMAL.split('\n').find((l) => l.includes('clock_event="gpu_idle"'))!;
    const rows = Object.entries(events).map(
      ([name, n]) => `${row.replace('"gpu_idle"', `"${name}"`).replace(/\} 2$/, `} ${n}`)}\n`,
    );
    text = text.replace(/DCGM_EXP_CLOCK_EVENTS_COUNT\{[^\n]*\n/g, '') + rows.join('');
  }
  return text;
}

/** Scrapes one per second through the parser into the detectors; the findings. */
function run(bodies: string[]): Finding[] {
  const state: DcgmState = new Map();
  const r = new DetectorRunner();
  bodies.forEach((body, i) => {
    for (const e of dcgmToEvents(body, T0 + i * 1000, { host: 'home' }, state).events) r.push(e);
  });
  r.flush();
  return r.take().findings;
}

const repeat = (n: number, body: string) => Array.from({ length: n }, () => body);

describe('throttle detector on dcgm-exporter window counts', () => {
  it('a clock drop with thermal events counted in the window is a thermal throttle; it resolves with the clock', () => {
    const fs = run([
      ...repeat(10, scrape(MAX_MHZ, {})),
      ...repeat(20, THERMAL),
      // The clock is back; the window still counts the events for minutes: no throttle for that.
      ...repeat(80, scrape(MAX_MHZ)),
    ]);
    const open = fs.find((f) => f.type === 'throttle' && f.state === 'open');
    expect(open).toMatchObject({ host: 'home', gpu: 0, action: 'cordon' });
    expect(open?.evidence.reasons).toEqual(['sw_thermal_slowdown', 'hw_thermal_slowdown']);
    expect(open?.evidence.sm_clock_mhz).toBe(1065);
    expect(fs.some((f) => f.type === 'throttle' && f.state === 'resolved')).toBe(true);
  });

  it('no throttle for a power cap counted alone, nor for thermal events while the clock is at its maximum', () => {
    expect(run([...repeat(5, scrape(MAX_MHZ, {})), ...repeat(40, scrape(1065, { power_cap: 30 }))])).toEqual(
      [],
    );
    expect(run([...repeat(5, scrape(MAX_MHZ, {})), ...repeat(40, scrape(MAX_MHZ))])).toEqual([]);
    // Idle counted in the window is no reason to ignore a busy, thermally slowed sample.
    const fs = run([
      ...repeat(5, scrape(MAX_MHZ, {})),
      ...repeat(20, scrape(1065, { gpu_idle: 3, hw_slowdown: 2 })),
    ]);
    expect(fs.find((f) => f.type === 'throttle')?.evidence.reasons).toEqual(['hw_slowdown']);
  });
});
