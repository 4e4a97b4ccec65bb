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
    let hit: { p: Prefix; m: RegExpExecArray } | undefined;
    for (const p of PREFIXES) {
      const m = p.re.exec(text);
      if (m) {
        hit = { p, m };
        break;
      }
    }
    if (!hit) break;
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

/**
 * Stateful: the off-the-bus message spans lines, an Xid 154 may wrap before its action
 * ("… from 0x0 (None)" / "to 0x2 (Node Reboot Required)"), and a 79 said twice is one event.
 */
export class KernelLogParser {
  private pending: { bus: string; ts: number; left: number } | undefined;
  /** An Xid 154 whose action is on the next line, if it continues there. */
  private wrapped154: { event: FaultEvent; rest: string } | undefined;
  private last79 = new Map<string, number>();

  constructor(private readonly ctx: KernelContext) {}

  /** What one line adds: usually nothing or one result; two when it ends a held-back 154. */
  push(raw: string, lineNo: number, now: number): KernelLine[] {
    // Hot path: nearly every kernel line is not the driver's; skip it without the prefix work.
    if (!this.pending && !this.wrapped154 && !raw.includes('NVRM')) return [];
    const { ts: own, text } = splitPrefix(raw, now, this.ctx.bootTimeMs);
    const ts = own ?? now;
    // /dev/kmsg escapes a record's inner newlines as \x0a: read its lines in order.
    const parts = text.includes('\\x0a') ? text.split('\\x0a').map((t) => t.trim()) : [text];
    const out: KernelLine[] = [];
    for (const part of parts) {
      if (this.wrapped154) {
        const w = this.wrapped154;
        this.wrapped154 = undefined;
        if (/^(?:NVRM:\s*)?(?:to 0x|\()/.test(part)) {
          out.push({ event: withRecovery(w.event, `${w.rest} ${part.replace(/^NVRM:\s*/, '')}`) });
          continue;
        }
        out.push({ event: w.event });
      }
      const r = this.text(part, lineNo, ts, raw);
      if (!('ignored' in r)) out.push(r);
    }
    return out;
  }

  /** Whether a line is held back waiting for its continuation (flush it when the input goes quiet). */
  get holding(): boolean {
    return this.wrapped154 !== undefined;
  }

  /** At the end of the input, or when it has gone quiet: what is still held back. */
  flush(): KernelLine[] {
    const w = this.wrapped154;
    this.wrapped154 = undefined;
    return w ? [{ event: w.event }] : [];
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
    if (code === 154 && !RECOVERY.test(rest)) {
      // Held back a line: its action may follow on a continuation line.
      this.wrapped154 = { event: this.fault(ts, busId, code, rest || `XID ${code}`, extra), rest };
      return { ignored: true };
    }
    if (code >= 144 && code <= 150) {
      const w = NVLINK_WORD.exec(rest);
      if (w) extra.nvlink_fatal = w[1].toLowerCase() === 'fatal';
    }
    const root = ROOT_CAUSE.exec(rest);
    if (root) extra.root_cause_xid = Number(root[1]);
    const event = this.fault(ts, busId, code, rest || `XID ${code}`, extra);
    return { event: code === 154 ? withRecovery(event, rest) : event };
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

/** Xid 154's recovery action (hex code, name, and the action before) read from its message. */
function withRecovery(e: FaultEvent, message: string): FaultEvent {
  const r = RECOVERY.exec(message);
  if (!r) return e;
  return {
    ...e,
    message,
    recovery_action: Number.parseInt(r[3], 16),
    ...(r[4] ? { recovery_action_name: r[4].trim() } : {}),
    ...(r[1] ? { recovery_action_from: Number.parseInt(r[1], 16) } : {}),
  };
}

/** One line on its own (no state carried between lines). */
export function parseKernelLine(line: string, lineNo: number, now: number, ctx: KernelContext): KernelLine {
  const p = new KernelLogParser(ctx);
  return [...p.push(line, lineNo, now), ...p.flush()][0] ?? { ignored: true };
}
