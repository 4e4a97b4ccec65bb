/**
 * The one runtime logger (pino): every line on stderr with a timestamp, the level and the
 * command. Text for people by default (`2026-12-01T09:59:52.123Z WARN rankwatch up: …`), JSON
 * lines for log shippers with RANKWATCH_LOG_FORMAT=json; RANKWATCH_LOG_LEVEL sets the level
 * (default info). The command line reads both (cli/process-options.ts) and sets them here once,
 * with `setLogDefaults`. What a command prints as its result (tables, reports, findings) stays on
 * stdout and is not logged.
 */
import { pino } from 'pino';

export type Logger = pino.Logger;
export type LogFormat = 'text' | 'json';

export interface LoggerOptions {
  /** Where lines go (default: stderr). */
  write?: (line: string) => void;
  format?: LogFormat;
  level?: string;
}

const defaults: { format: LogFormat; level: string } = { format: 'text', level: 'info' };

/** The format and level of every logger created from now on that does not name its own. */
export function setLogDefaults(d: Partial<typeof defaults>): void {
  Object.assign(defaults, Object.fromEntries(Object.entries(d).filter(([, v]) => v !== undefined)));
}

/** A logger named for the command (`rankwatch up`, `rankwatch collect`, …). */
export function createLogger(name: string, o: LoggerOptions = {}): Logger {
  const write = o.write ?? ((line: string) => process.stderr.write(line));
  const format = o.format ?? defaults.format;
  const stream = { write: format === 'json' ? write : (json: string) => write(toText(json)) };
  return pino(
    {
      name,
      level: o.level ?? defaults.level,
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    stream,
  );
}

/** A logger that drops everything (tests, library use). */
export const silentLogger = (): Logger => pino({ level: 'silent' });

const OMIT = new Set(['time', 'level', 'name', 'msg', 'pid', 'hostname']);

/** One JSON line from pino → `TIME LEVEL name: msg key=value…`. */
function toText(json: string): string {
  let r: Record<string, unknown>;
  try {
    r = JSON.parse(json);
  } catch {
    return json;
  }
  const level = String(r.level ?? 'info').toUpperCase();
  let line = `${r.time} ${level} ${r.name}: ${r.msg ?? ''}`;
  for (const [k, v] of Object.entries(r)) {
    if (OMIT.has(k)) continue;
    if (k === 'err' && v && typeof v === 'object') {
      const e = v as { message?: string; code?: string; stack?: string };
      line += ` err=${JSON.stringify(e.message ?? v)}`;
      if (e.code) line += ` code=${JSON.stringify(e.code)}`;
      // An error logged as one (a 500's) keeps where it came from, still on one line.
      if (r.level === 'error' && e.stack) line += ` stack=${JSON.stringify(frames(e.stack))}`;
      continue;
    }
    line += ` ${k}=${typeof v === 'string' ? JSON.stringify(v) : JSON.stringify(v)}`;
  }
  return `${line}\n`;
}

/** The first frames of a stack, on one line: `at f (file:1:2) < at g (…)`. */
const frames = (stack: string) =>
  stack
    .split('\n')
    .filter((l) => /^\s+at /.test(l))
    .slice(0, 8)
    .map((l) => l.trim())
    .join(' < ');
