import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryTransport } from '../../stream/memory.js';
import { Collector } from '../collector.js';
import { DEFAULT_QUERY } from '../parsers/nvidia_smi.js';
import { nvidiaSmi } from './nvidia_smi.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-smi-'));
const savedPath = process.env.PATH;
afterAll(() => {
  process.env.PATH = savedPath;
  rmSync(dir, { recursive: true, force: true });
});

/**
 * A real executable named nvidia-smi, first on PATH, answering as a driver before R535 does: it
 * rejects the renamed field with nvidia-smi's own message (see huggingface/candle#733 for the
 * wording) and exit code 2, and prints CSV rows for the older name. Every call is logged.
 */
function installOldDriverStandIn(): string {
  const rows = readFileSync(
    join(import.meta.dirname, '../parsers/fixtures/nvidia-smi-nounits-noheader.csv'),
    'utf8',
  );
  writeFileSync(join(dir, 'rows.csv'), rows);
  const script = join(dir, 'nvidia-smi');
  writeFileSync(
    script,
    [
      '#!/bin/sh',
      `echo "$*" >> "${join(dir, 'calls.log')}"`,
      'case "$*" in',
      `  *clocks_event_reasons.active*) echo 'Field "clocks_event_reasons.active" is not a valid field to query.'; echo; exit 2 ;;`,
      'esac',
      `cat "${join(dir, 'rows.csv')}"`,
      '',
    ].join('\n'),
  );
  chmodSync(script, 0o755);
  process.env.PATH = `${dir}:${savedPath}`;
  return join(dir, 'calls.log');
}

describe('nvidia_smi source on an older driver', () => {
  it('falls back to clocks_throttle_reasons.active once, remembers it, and counts no parse error', async () => {
    const calls = installOldDriverStandIn();
    const warnings: string[] = [];
    const logger = { info: () => {}, warn: (m: string) => warnings.push(m) };
    const c = new Collector({ publisher: new MemoryTransport(), logger, flushMs: 20 });
    const deps = c.deps('node-7');
    const events: { kind: string; [k: string]: unknown }[] = [];
    const src = nvidiaSmi.create(
      { type: 'nvidia_smi', command: 'nvidia-smi', intervalMs: 1000, query: DEFAULT_QUERY },
      {
        ...deps,
        emit: (e) => {
          events.push(...(e as typeof events));
          deps.emit(e);
        },
      },
    );
    src.start();
    const log = () => readFileSync(calls, 'utf8').trim().split('\n');
    const end = Date.now() + 15_000;
    // The stand-in exits after its rows, so the source restarts it: the third call shows what it remembered.
    while (Date.now() < end && (events.length < 4 || log().length < 3))
      await new Promise((r) => setTimeout(r, 50));
    await src.stop();
    await c.stop();

    const [first, second, third] = log();
    expect(first).toContain('clocks_event_reasons.active');
    expect(second).toContain('clocks_throttle_reasons.active');
    expect(second).not.toContain('clocks_event_reasons.active');
    expect(third).toContain('clocks_throttle_reasons.active');
    expect(c.counters().parse_errors).toEqual({});
    expect(warnings.filter((w) => /rejects the field "clocks_event_reasons.active"/.test(w))).toHaveLength(1);
    expect(events[0]).toMatchObject({
      kind: 'gpu',
      host: 'node-7',
      gpu: 0,
      sm_clock_mhz: 1410,
      throttle_reasons: 0x1,
    });
    expect(events[1]).toMatchObject({ gpu: 1, sm_clock_mhz: 1095, throttle_reasons: 0x88 });
    expect(deps.pciMap.get('0000:07:00')).toBe(0);
  });
});
