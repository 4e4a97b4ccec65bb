/**
 * Real kernel log lines (collectors/parsers/fixtures/kernel-real.log, each block names its public
 * report) through the parser and the triage: what each real fault asks of the node.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { KernelLogParser } from '../../collectors/parsers/kernel_xid.js';
import type { FaultEvent } from '../../schema/events.js';
import type { Finding } from '../../schema/finding.js';
import { FindingLog } from '../findings.js';
import { FaultTriage } from './xid.js';

it('real Xid lines are triaged as the catalog says', () => {
  const real = readFileSync(
    join(import.meta.dirname, '..', '..', 'collectors', 'parsers', 'fixtures', 'kernel-real.log'),
    'utf8',
  );
  const now = Date.parse('2026-12-01T00:00:00Z');
  const p = new KernelLogParser({
    host: 'gpu-0017',
    pciToGpu: new Map(),
    bootTimeMs: Date.parse('2026-11-30T00:00:00Z'),
  });
  const lines = real.split('\n').filter((l) => l !== '' && !l.startsWith('#'));
  const parsed = [...lines.flatMap((l, i) => p.push(l, i + 1, now)), ...p.flush()];
  const out: Finding[] = [];
  const t = new FaultTriage(new FindingLog(out));
  for (const r of parsed) if ('event' in r) t.process(r.event as FaultEvent);
  t.flush();
  const got = out
    .map((f) => `${f.evidence.code} ${f.evidence.pci_bus_id} ${f.evidence.recovery} ${f.action}`)
    .sort();
  expect(got).toEqual(
    [
      '79 0000:b3:00 reboot_node drain', // NVSentinel#155: off the bus, no Xid line
      '79 0000:06:00 reboot_node drain', // open-gpu-kernel-modules#1151
      '45 0000:dc:00 reset_gpu cordon', // caused by NVLink Xid 149: judged by the root cause
      '45 0000:ed:00 reset_gpu cordon', // caused by Xid 145
      '144 0000:01:00 record none', // Nonfatal, no 154 followed
      '149 0000:00:00 reset_gpu cordon', // Fatal, no 154 followed
      '145 0018:01:00 record none', // Nonfatal
      '154 0008:01:00 reset_gpu cordon', // the driver asks for 0x1 (GPU Reset Required)
      '119 0002:00:00 reset_gpu cordon', // GSP RPC timeout
      '13 0000:cb:00 restart_app none', // an application's SM warp exception
    ].sort(),
  );
});
