/**
 * Kernel log lines → XID `fault` events. Accepts the NVRM line with or without the "PCI:" prefix
 * and with or without pid/name, behind any of the usual prefixes (journal short / short-iso,
 * dmesg "[secs]", /dev/kmsg "level,seq,usec,-;"). The GPU comes from the PCI bus id through a map
 * (from nvidia-smi's pci.bus_id or config); an unmapped bus id keeps the bus id and no gpu.
 */
import type { FaultEvent as F } from '../../schema/events.js';
import { normalizePciBusId } from './nvidia_smi.js';
import { type Open, type ParseProblem, problem } from './problems.js';

type FaultEvent = Open<F>;

export interface KernelContext {
  host: string;
  /** Normalised bus id ("0000:3b:00") → GPU index. */
  pciToGpu: Map<string, number>;
}

export type KernelLine = { event: FaultEvent } | { problem: ParseProblem } | { ignored: true };

const XID =
  /NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-9a-fA-F])?)\): (\d+),\s*(.*)$/;
const PID = /^pid=('?[^,]*'?),\s*/;
const NAME = /^name=([^,]*),\s*/;
const ISO = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))\s/;

export function parseKernelLine(line: string, lineNo: number, now: number, ctx: KernelContext): KernelLine {
  if (!line.includes('NVRM: Xid')) return { ignored: true };
  const m = XID.exec(line);
  if (!m) return { problem: problem(lineNo, 'NVRM Xid line in an unknown or truncated form', line) };
  const busId = normalizePciBusId(m[1]);
  const code = Number(m[2]);
  let rest = m[3];
  let pid: string | undefined;
  let name: string | undefined;
  const p = PID.exec(rest);
  if (p) {
    pid = p[1].replace(/'/g, '');
    rest = rest.slice(p[0].length);
  }
  const n = NAME.exec(rest);
  if (n) {
    name = n[1];
    rest = rest.slice(n[0].length);
  }
  const iso = ISO.exec(line);
  const ts = iso ? Date.parse(iso[1].replace(/([+-]\d{2})(\d{2})$/, '$1:$2')) : now;
  const gpu = ctx.pciToGpu.get(busId);
  const event: FaultEvent = {
    v: 1,
    kind: 'fault',
    ts: Number.isFinite(ts) ? ts : now,
    host: ctx.host,
    ...(gpu !== undefined ? { gpu } : {}),
    source: 'xid',
    code,
    message: rest.trim() || `XID ${code}`,
    pci_bus_id: busId,
    ...(pid && pid !== '<unknown>' ? { pid } : {}),
    ...(name && name !== '<unknown>' ? { process: name } : {}),
  };
  return { event };
}
