/**
 * Kernel log lines → XID `fault` events, as the log really reads:
 * - the NVRM Xid line with or without "PCI:", pid/name, behind journal short / short-iso, syslog,
 *   `dmesg` "[secs]", `dmesg -T` "[Mon Sep 14 04:48:45 2026]", /dev/kmsg "level,seq,usec,-;" and
 *   log-shipper RFC3339 prefixes (`kubectl logs --timestamps`); CRLF and tabs tolerated;
 * - the event time is the log's own: absolute stamps as printed (local time where the format has no
 *   zone), "[secs]" and kmsg µs since boot through the boot time; the read time only when the line
 *   carries no usable stamp;
 * - "NVRM: The NVIDIA GPU <bdf> … has fallen off the bus" (one record over several lines, no Xid)
 *   and "NVRM: GPU <bdf>: GPU has fallen off the bus." are Xid 79; a 79 already reported for the
 *   same bus within minutes is not reported again;
 * - Xid 154 carries its recovery action (hex code and name), NVLink Xids 144–150 their
 *   Fatal/Nonfatal word, "caused by previous Xid N" its root cause.
 * The GPU comes from the PCI bus id through a map; an unmapped bus id keeps the bus id and no gpu.
 */
import type { FaultEvent as F } from '../../schema/events.js';
import { normalizePciBusId } from './nvidia_smi.js';
import { type Open, type ParseProblem, parseRfc3339, problem } from './problems.js';

type FaultEvent = Open<F>;

export interface KernelContext {
  host: string;
  /** Normalised bus id ("0000:3b:00") → GPU index. */
  pciToGpu: Map<string, number>;
  /** Epoch ms of this boot: places dmesg "[secs]" and kmsg µs stamps in time. */
  bootTimeMs?: number;
}

export type KernelLine = { event: FaultEvent } | { problem: ParseProblem } | { ignored: true };

const BUS = '[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\\.[0-9a-fA-F])?';
const XID = new RegExp(`NVRM: Xid \\((?:PCI:)?(${BUS})\\): (\\d+),\\s*(.*)$`);
const PID = /^pid=('?[^,]*'?),\s*/;
const NAME = /^name=([^,]*),\s*/;
const OFF_BUS_START = new RegExp(`NVRM: The NVIDIA GPU (${BUS})`);
const OFF_BUS_ONE_LINE = new RegExp(`NVRM: GPU (${BUS}): GPU has fallen off the bus`);
const RECOVERY =
  /recovery action changed (?:from (0x[0-9a-fA-F]+)(?:\s*\(([^)]*)\))?\s+)?to (0x[0-9a-fA-F]+)(?:\s*\(([^)]*)\))?/;
const NVLINK_WORD = /\b(Non-?fatal|Fatal)\b/i;
const ROOT_CAUSE = /caused by previous Xid (\d+)/i;
/** A later 79 for the same bus within this window is the same event said twice. */
const SAME_79_MS = 10 * 60_000;

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const ISO_RE = /^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s+/;
const SYSLOG_HOST = /^\S+ kernel(?:\[\d+\])?:\s*/;
const JOURNAL = /^([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d+))? \S+ kernel(?:\[\d+\])?:\s*/;
const DMESG_T = /^\[\s*[A-Z][a-z]{2} ([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]\s*/;
const DMESG_SECS = /^\[\s*(\d+\.\d+)\]\s*/;
const KMSG = /^\d+,\d+,(\d+),[^;]*;/;
/** "kernel: " with no stamp or host before it (a syslog line quoted without its head). */
const BARE_KERNEL = /^kernel(?:\[\d+\])?:\s*/;

interface Prefix {
  re: RegExp;
  /** The stamp (ranked: 3 the log's absolute time, 2 boot-relative, 1 a shipper's) and, when it eats more, the rest. */
  read(
    m: RegExpExecArray,
    rest: string,
    now: number,
    boot?: number,
  ): { ts?: number; rank: number; rest?: string };
}

const PREFIXES: Prefix[] = [
  {
    re: ISO_RE,
    read: (m, rest) => {
      // "stamp host kernel:" is the log's own (journal short-iso, syslog); a bare stamp a shipper's.
      const host = SYSLOG_HOST.exec(rest);
      return host
        ? { ts: parseRfc3339(m[1]), rank: 3, rest: rest.slice(host[0].length) }
        : { ts: parseRfc3339(m[1]), rank: 1 };
    },
  },
  { re: JOURNAL, read: (m, _r, now) => ({ ts: journalTime(m, now), rank: 3 }) },
  {
    re: DMESG_T,
    read: (m) => ({
      ts: new Date(+m[6], MONTHS.indexOf(m[1]), +m[2], +m[3], +m[4], +m[5]).getTime(),
      rank: 3,
    }),
  },
  {
    re: DMESG_SECS,
    read: (m, _r, _n, boot) => ({ ts: boot === undefined ? undefined : boot + Number(m[1]) * 1000, rank: 2 }),
  },
  { re: BARE_KERNEL, read: () => ({ rank: 0 }) },
  {
    re: KMSG,
    read: (m, _r, _n, boot) => ({ ts: boot === undefined ? undefined : boot + Number(m[1]) / 1000, rank: 2 }),
  },
];

/** The log's own time and the message text, prefixes stripped. Absolute stamps beat boot-relative ones, which beat a shipper's. */
export function splitPrefix(raw: string, now: number, bootTimeMs?: number): { ts?: number; text: string } {
  let text = raw.replace(/\r$/, '').replace(/\t/g, ' ').trimEnd();
  let ts: number | undefined;
  let rank = 0;
  const take = (t: number | undefined, r: number) => {
    if (t !== undefined && Number.isFinite(t) && r > rank) {
      ts = t;
      rank = r;
    }
  };
  for (let guard = 0; guard < 5; guard++) {
    text = text.trimStart();
    const hit = PREFIXES.map((p) => ({ p, m: p.re.exec(text) })).find((x) => x.m);
    if (!hit?.m) break;
    text = text.slice(hit.m[0].length);
    const { ts: t, rank: r, rest } = hit.p.read(hit.m, text, now, bootTimeMs);
    if (rest !== undefined) text = rest;
    take(t, r);
  }
  return { ts, text: text.trimStart() };
}

/** Journal "short" has no year: the stamp's year is the read time's, or the one before for a December line read in January. */
function journalTime(m: RegExpExecArray, now: number): number {
  const mon = MONTHS.indexOf(m[1]);
  if (mon < 0) return Number.NaN;
  const ms = Number((m[6] ?? '').slice(0, 3).padEnd(3, '0'));
  const year = new Date(now).getFullYear();
  const t = new Date(year, mon, +m[2], +m[3], +m[4], +m[5], ms).getTime();
  return t > now + 86_400_000 ? new Date(year - 1, mon, +m[2], +m[3], +m[4], +m[5], ms).getTime() : t;
}

/** Stateful: the off-the-bus message spans lines, and a 79 said twice is one event. */
export class KernelLogParser {
  private pending: { bus: string; ts: number; left: number } | undefined;
  private last79 = new Map<string, number>();

  constructor(private readonly ctx: KernelContext) {}

  push(raw: string, lineNo: number, now: number): KernelLine {
    const { ts: own, text } = splitPrefix(raw, now, this.ctx.bootTimeMs);
    const ts = own ?? now;
    // /dev/kmsg escapes a record's inner newlines as \x0a: read its lines in order.
    if (text.includes('\\x0a')) {
      let out: KernelLine = { ignored: true };
      for (const part of text.split('\\x0a')) {
        const r = this.text(part.trim(), lineNo, ts, raw);
        if (!('ignored' in r)) out = r;
      }
      return out;
    }
    return this.text(text, lineNo, ts, raw);
  }

  private text(text: string, lineNo: number, ts: number, raw: string): KernelLine {
    if (text.includes('NVRM: Xid')) return this.xid(text, lineNo, ts, raw);
    const one = OFF_BUS_ONE_LINE.exec(text);
    if (one) return this.offBus(normalizePciBusId(one[1]), ts);
    const start = OFF_BUS_START.exec(text);
    if (start) {
      const bus = normalizePciBusId(start[1]);
      if (text.includes('fallen off the bus')) return this.offBus(bus, ts);
      this.pending = { bus, ts, left: 3 };
      return { ignored: true };
    }
    if (this.pending) {
      const p = this.pending;
      if (text.includes('NVRM:') && text.includes('fallen off the bus')) {
        this.pending = undefined;
        return this.offBus(p.bus, p.ts);
      }
      if (--p.left <= 0) this.pending = undefined;
    }
    return { ignored: true };
  }

  private offBus(bus: string, ts: number): KernelLine {
    if (this.repeated79(bus, ts)) return { ignored: true };
    return {
      event: this.fault(ts, bus, 79, 'GPU has fallen off the bus (kernel message without an Xid line)', {
        xid_inferred: true,
      }),
    };
  }

  private repeated79(bus: string, ts: number): boolean {
    const before = this.last79.get(bus);
    this.last79.set(bus, ts);
    return before !== undefined && Math.abs(ts - before) < SAME_79_MS;
  }

  private xid(text: string, lineNo: number, ts: number, raw: string): KernelLine {
    const m = XID.exec(text);
    if (!m) return { problem: problem(lineNo, 'NVRM Xid line in an unknown or truncated form', raw) };
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
    rest = rest.replace(/\s+/g, ' ').trim();
    if (code === 79 && this.repeated79(busId, ts)) return { ignored: true };
    const extra: Record<string, unknown> = {};
    if (pid && pid !== '<unknown>') extra.pid = pid;
    if (name && name !== '<unknown>') extra.process = name;
    if (code === 154) {
      const r = RECOVERY.exec(rest);
      if (!r) return { problem: problem(lineNo, 'Xid 154 without a recovery action', raw) };
      extra.recovery_action = Number.parseInt(r[3], 16);
      if (r[4]) extra.recovery_action_name = r[4].trim();
      if (r[1]) extra.recovery_action_from = Number.parseInt(r[1], 16);
    }
    if (code >= 144 && code <= 150) {
      const w = NVLINK_WORD.exec(rest);
      if (w) extra.nvlink_fatal = w[1].toLowerCase() === 'fatal';
    }
    const root = ROOT_CAUSE.exec(rest);
    if (root) extra.root_cause_xid = Number(root[1]);
    return { event: this.fault(ts, busId, code, rest || `XID ${code}`, extra) };
  }

  private fault(
    ts: number,
    bus: string,
    code: number,
    message: string,
    extra: Record<string, unknown>,
  ): FaultEvent {
    const gpu = this.ctx.pciToGpu.get(bus);
    return {
      v: 1,
      kind: 'fault',
      ts,
      host: this.ctx.host,
      ...(gpu !== undefined ? { gpu } : {}),
      source: 'xid',
      code,
      message,
      pci_bus_id: bus,
      ...extra,
    };
  }
}

/** One line on its own (no state carried between lines). */
export function parseKernelLine(line: string, lineNo: number, now: number, ctx: KernelContext): KernelLine {
  return new KernelLogParser(ctx).push(line, lineNo, now);
}
