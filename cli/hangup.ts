/**
 * SIGHUP means two things. From a terminal that closed, it stops a command the way Ctrl-C does
 * (drained, as on SIGTERM), so `up` does not die mid-write. Sent on purpose (`kill -HUP`, a
 * supervisor's reload) to `up` or `serve`, it re-reads their --auth file and they run on. The two
 * are told apart by the terminal: once it hangs up, its file descriptors are no longer ttys.
 * Output to the closed terminal then fails (EIO) and goes nowhere, which must not cut the drain short.
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

/**
 * Errors writing to stdout and stderr: EPIPE (`rankwatch sim | head`) is a normal way to stop, EIO
 * after the terminal closed means there is no one to read; anything else is a real failure.
 *
 * Node 20 also aborts on its way out when the terminal it started on is gone: at exit it restores
 * the terminal's settings and treats the EIO as fatal (nodejs/node#51519; fixed in later Nodes by
 * nodejs/node#58200), dumping core after a clean drain. So once the terminal has closed, the
 * process ends with SIGKILL at its exit, after everything else has run: nobody waits for its
 * status then, and a core dump per closed terminal would be worse.
 */
export function guardOutput(): void {
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') process.exit(0);
    if (!(err.code === 'EIO' && terminalClosed())) throw err;
  });
  process.stderr.on('error', (err: NodeJS.ErrnoException) => {
    if (!(err.code === 'EIO' && terminalClosed()) && err.code !== 'EPIPE') throw err;
  });
  process.on('exit', () => {
    if (terminalClosed()) process.kill(process.pid, 'SIGKILL');
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
