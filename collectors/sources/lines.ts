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

/** Runs `command args`, hands each stdout line over, restarts it with backoff when it exits. */
export function commandLines(
  name: string,
  command: string,
  args: string[],
  deps: SourceDeps,
  onLine: (line: string) => void,
): LineInput {
  let child: ChildProcess | undefined;
  let stopped = false;
  let failures = 0;
  let timer: NodeJS.Timeout | undefined;
  const run = () => {
    if (stopped) return;
    const started = Date.now();
    const c = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    child = c;
    let stderr = '';
    c.stderr?.on('data', (d: Buffer) => {
      if (stderr.length < 2000) stderr += d.toString();
    });
    createInterface({ input: c.stdout! }).on('line', onLine);
    const restart = (why: string) => {
      if (child !== c) return;
      child = undefined;
      if (stopped) return;
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
    c.on('exit', (code, signal) => restart(`exited (${signal ?? `code ${code}`})`));
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
