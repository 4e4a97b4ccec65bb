import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryTransport } from '../../stream/memory.js';
import { Collector } from '../collector.js';
import { kernelLog } from './kernel_log.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-kernel-'));
const savedPath = process.env.PATH;
afterAll(() => {
  process.env.PATH = savedPath;
  rmSync(dir, { recursive: true, force: true });
});

/**
 * A real nvidia-smi stand-in first on PATH answering the pci.bus_id query: the first call sees
 * only GPU 0; from the second on, GPU 1 at 0000:B3:00.0 is there too (the GPU the log names).
 */
function installStandIn(): void {
  const script = join(dir, 'nvidia-smi');
  const n = join(dir, 'calls');
  writeFileSync(
    script,
    [
      '#!/bin/sh',
      `echo x >> "${n}"`,
      'echo "0, 00000000:3B:00.0"',
      `[ "$(wc -l < "${n}")" -gt 1 ] && echo "1, 00000000:B3:00.0"`,
      'exit 0',
      '',
    ].join('\n'),
  );
  chmodSync(script, 0o755);
  process.env.PATH = `${dir}:${savedPath}`;
}

describe('kernel_log source', () => {
  it('re-learns the PCI map when a fault names an unknown bus; keeps the bus id when still unknown', async () => {
    installStandIn();
    const real = readFileSync(join(import.meta.dirname, '../parsers/fixtures/kernel-real.log'), 'utf8');
    const log = join(dir, 'kern.log');
    writeFileSync(log, real.replaceAll('\n', '\r\n'));
    const c = new Collector({
      publisher: new MemoryTransport(),
      logger: { info() {}, warn() {} },
      flushMs: 20,
    });
    const deps = c.deps('gpu-0017');
    const events: Record<string, unknown>[] = [];
    const src = kernelLog.create(
      {
        type: 'kernel_log',
        mode: 'file',
        path: log,
        from: 'start',
        pollMs: 50,
        pciMap: {},
        bootTime: '2026-11-30T00:00:00Z',
      },
      { ...deps, emit: (e) => events.push(...(e as Record<string, unknown>[])) },
    );
    src.start();
    const end = Date.now() + 10_000;
    while (events.length < 10 && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
    await src.stop();
    await c.stop();
    expect(c.counters().parse_errors).toEqual({});
    const offBus = events.find((e) => e.pci_bus_id === '0000:b3:00');
    expect(offBus).toMatchObject({ code: 79, gpu: 1, host: 'gpu-0017' });
    // "[ 1843.308145]" dated from the saved log's boot, not the read time.
    expect(offBus?.ts).toBe(Date.parse('2026-11-30T00:00:00Z') + 1_843_308.145);
    const unknown = events.find((e) => e.pci_bus_id === '0000:06:00');
    expect(unknown).toMatchObject({ code: 79 });
    expect(unknown).not.toHaveProperty('gpu');
    expect(events).toHaveLength(10);
  });
});
