/**
 * SIGHUP means two things. From a terminal that closed, it stops a command the way Ctrl-C does
 * (drained, as on SIGTERM), so `up` does not die mid-write. Sent on purpose (`kill -HUP`, a
 * supervisor's reload) to `up` or `serve`, it re-reads their --auth file and they run on. The two
 * are told apart by the terminal: once it hangs up, its file descriptors are no longer ttys.
 */
import { isatty } from 'node:tty';
import type { WatchedAuthFile } from '../api/auth-file.js';
import type { Logger } from '../core/log.js';

const STDIO = [0, 1, 2];
const startedOnTerminal = STDIO.some((fd) => isatty(fd));
const terminalClosed = () => startedOnTerminal && !STDIO.some((fd) => isatty(fd));

/** For every command: SIGHUP stops it as SIGTERM does, unless the command takes SIGHUP itself and no terminal closed. */
export function stopOnHangup(): void {
  process.on('SIGHUP', () => {
    if (terminalClosed() || process.listenerCount('SIGHUP') === 1) process.kill(process.pid, 'SIGTERM');
  });
}

/** For `up` and `serve`: SIGHUP re-reads the --auth file (when there is one); returns what undoes it. */
export function reloadOnHangup(file: WatchedAuthFile | undefined, log: Logger): () => void {
  const onHangup = () => {
    if (terminalClosed()) return; // stopOnHangup stops the command
    if (file) file.reload('SIGHUP');
    else log.info('SIGHUP: no --auth file to re-read');
  };
  process.on('SIGHUP', onHangup);
  return () => process.off('SIGHUP', onHangup);
}
