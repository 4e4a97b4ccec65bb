/**
 * The common part of sources that read text line by line from a file (tailed) or a command's
 * output (restarted when it exits). Each source supplies only its per-line parser.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { backoffMs, type SourceDeps } from '../source.js';
import { FileTail } from './tail.js';

export interface LineInput {
  start(): void;
  stop(): Promise<void>;
}

export function tailLines(
  name: string,
  cfg: { path: string; from: 'start' | 'end'; pollMs: number },
  deps: SourceDeps,
  onLines: (lines: string[]) => void,
): LineInput {
  return new FileTail(cfg, {
    onLines,
    onError: (err) => deps.sourceError(name, err),
    onNotice: (msg) => deps.logger.info(`${name}: ${msg}`),
    onLongLine: (bytes) =>
      deps.parseProblems(name, [
        { line: 0, reason: `line longer than the limit (${bytes} bytes), skipped`, raw: '' },
      ]),
  });
}

export interface CommandOptions {
  /** Each stderr line, for sources that read the command's complaints (also kept for the error). */
  onStderrLine?(line: string): void;
  /** Asked when the command exits: true restarts it at once, not counted as a failure (the
   * source has changed its arguments after reading why it failed). */
  restartNow?(): boolean;
}

/**
 * Runs `command args`, hands each stdout line over (CR of CRLF output stripped), restarts it with
 * backoff when it exits. `args` may be a function: it is asked again at every (re)start.
 */
export function commandLines(
  name: string,
  command: string,
  args: string[] | (() => string[]),
  deps: SourceDeps,
  onLine: (line: string) => void,
  opts: CommandOptions = {},
): LineInput {
  let child: ChildProcess | undefined;
  let stopped = false;
  let failures = 0;
  let timer: NodeJS.Timeout | undefined;
  const run = () => {
    if (stopped) return;
    const started = Date.now();
    const c = spawn(command, typeof args === 'function' ? args() : args, {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child = c;
    let stderr = '';
    createInterface({ input: c.stderr!, crlfDelay: Number.POSITIVE_INFINITY }).on('line', (l) => {
      if (stderr.length < 2000) stderr += `${l}\n`;
      opts.onStderrLine?.(l);
    });
    createInterface({ input: c.stdout!, crlfDelay: Number.POSITIVE_INFINITY }).on('line', (l) =>
      onLine(l.endsWith('\r') ? l.slice(0, -1) : l),
    );
    const restart = (why: string) => {
      if (child !== c) return;
      child = undefined;
      if (stopped) return;
      if (opts.restartNow?.()) {
        timer = setTimeout(run, 0);
        return;
      }
      failures = Date.now() - started > 60_000 ? 1 : failures + 1;
      deps.sourceError(
        name,
        new Error(`${command} ${why}${stderr ? `: ${stderr.trim().slice(0, 300)}` : ''}`),
      );
      timer = setTimeout(run, backoffMs(failures));
    };
    c.on('error', (err) =>
      restart(`failed to start (${(err as NodeJS.ErrnoException).code ?? err.message})`),
    );
    // 'close', not 'exit': the last stdout lines (often the reason it exited) are read by then.
    c.on('close', (code, signal) => restart(`exited (${signal ?? `code ${code}`})`));
  };
  return {
    start: () => run(),
    stop: async () => {
      stopped = true;
      clearTimeout(timer);
      child?.kill('SIGTERM');
    },
  };
}
