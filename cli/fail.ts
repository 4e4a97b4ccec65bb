/**
 * The one place where an error that ends a command becomes what a person reads: a single line,
 * `rankwatch <cmd>: <CODE>: <what>, <which flag or path>. <what to do>`, and an exit status (2 when
 * what was typed is wrong, 1 otherwise). Errors from Node (a port in use, a folder where a file is
 * expected, permission denied) and from chDB (a data folder another process holds) are classed here,
 * by their codes, wherever they were thrown, so no command needs its own try/catch for them.
 */
import { resolve, sep } from 'node:path';
import { ERRORS, type ErrorCode, RankwatchError } from '../core/errors.js';

export interface Failure {
  line: string;
  exit: 1 | 2;
}

type Errno = Error & { code?: string; path?: string; syscall?: string; address?: string; port?: number };

/** The flag (or positional argument) whose value is `path`, or a folder above it. */
export function flagFor(path: string, argv: string[]): string | undefined {
  const target = resolve(path);
  const matches = (value: string) => {
    const v = resolve(value);
    return v === target || target.startsWith(v + sep);
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const eq = a.startsWith('--') ? a.indexOf('=') : -1;
    if (eq > 0 && matches(a.slice(eq + 1))) return a.slice(0, eq);
    if (
      a.startsWith('-') &&
      eq < 0 &&
      i + 1 < argv.length &&
      !argv[i + 1].startsWith('-') &&
      matches(argv[i + 1])
    )
      return a;
    if (!a.startsWith('-') && (i === 0 || !argv[i - 1].startsWith('-')) && matches(a))
      return 'the input FILE';
  }
  return undefined;
}

function flagWithValue(value: string, argv: string[], fallback: string): string {
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith('--') && a.endsWith(`=${value}`)) return a.slice(0, a.indexOf('='));
    if (a.startsWith('-') && argv[i + 1] === value) return a;
  }
  return fallback;
}

/** The first error in the cause chain that carries a code we know how to explain. */
function known(err: unknown): Errno | undefined {
  for (
    let e = err as Errno | undefined, depth = 0;
    e && depth < 8;
    e = e.cause as Errno | undefined, depth++
  ) {
    if (typeof e.code === 'string' && (e.code in NODE_CODES || e.code.startsWith('CHDB'))) return e;
    if (/Cannot lock file|Another server instance/.test(String(e.message))) return e;
  }
  return undefined;
}

/**
 * Codes that mean what was typed is wrong: a flag, a value, a config file or key (a budget left
 * out, a GPU model or model file the command cannot use). Exit 2, as README's rule says.
 */
const TYPED: ReadonlySet<ErrorCode> = new Set([
  'RANKWATCH_ERR_USAGE',
  'RANKWATCH_ERR_CONFIG',
  'RANKWATCH_ERR_MODEL',
  'RANKWATCH_ERR_UNKNOWN_GPU',
]);

const NODE_CODES: Record<string, true> = {
  EADDRINUSE: true,
  EADDRNOTAVAIL: true,
  ERR_SOCKET_BAD_PORT: true,
  EACCES: true,
  EPERM: true,
  EROFS: true,
  ENOSPC: true,
  EISDIR: true,
  ENOTDIR: true,
  EEXIST: true,
  ENOENT: true,
};

/** The check a store makes before opening its folder (store/chdb.ts) is an access() call. */
const unwritable = (e: Errno) => (e.syscall === 'access' ? 'not writable by this user, ' : '');

function line(cmd: string, code: ErrorCode, what: string): string {
  const text = what.replace(/\s*\n\s*/g, '; ').replace(/[.\s]+$/, '');
  const hint = ERRORS[code].hint.replace(/\.$/, '');
  return `rankwatch ${cmd}: ${code}: ${text}. ${hint}.`;
}

export function explain(err: unknown, cmd: string, argv: string[]): Failure {
  if (err instanceof RankwatchError) {
    // A catalogued error wrapping a Node/chDB one (e.g. the store) keeps its own words.
    return { line: line(cmd, err.code, err.message), exit: TYPED.has(err.code) ? 2 : 1 };
  }
  const e = known(err);
  if (e) {
    const at = (path: string | undefined, fallback: string) =>
      path === undefined ? fallback : `${path}, ${flagFor(path, argv) ?? fallback}`;
    switch (e.code) {
      case 'EADDRINUSE':
        return {
          line: line(
            cmd,
            'RANKWATCH_ERR_PORT_IN_USE',
            `${e.address ?? ''}:${e.port} is in use, ${flagWithValue(String(e.port), argv, '--port')}`,
          ),
          exit: 1,
        };
      case 'EADDRNOTAVAIL':
        return {
          line: line(cmd, 'RANKWATCH_ERR_USAGE', `${e.address} is not an address of this machine, --host`),
          exit: 2,
        };
      case 'ERR_SOCKET_BAD_PORT':
        return {
          line: line(cmd, 'RANKWATCH_ERR_USAGE', 'a port is a whole number from 0 to 65535, --port'),
          exit: 2,
        };
      case 'EACCES':
      case 'EPERM':
        if (e.syscall === 'listen' || e.syscall === 'bind')
          return {
            line: line(
              cmd,
              'RANKWATCH_ERR_USAGE',
              `port ${e.port} needs privileges (ports below 1024), ${flagWithValue(String(e.port), argv, '--port')}`,
            ),
            exit: 2,
          };
        return {
          line: line(
            cmd,
            'RANKWATCH_ERR_PATH',
            `${unwritable(e)}permission denied (${e.code}): ${at(e.path, 'a path')}`,
          ),
          exit: 1,
        };
      case 'EROFS':
        return {
          line: line(
            cmd,
            'RANKWATCH_ERR_PATH',
            `${unwritable(e)}read-only file system (EROFS): ${at(e.path, 'a path')}`,
          ),
          exit: 1,
        };
      case 'ENOSPC':
        return {
          line: line(cmd, 'RANKWATCH_ERR_PATH', `no space left on the device of ${at(e.path, 'a path')}`),
          exit: 1,
        };
      case 'EISDIR':
        return {
          line: line(cmd, 'RANKWATCH_ERR_PATH', `a folder where a file is expected: ${at(e.path, 'a path')}`),
          exit: 2,
        };
      case 'ENOTDIR':
      case 'EEXIST':
        return {
          line: line(cmd, 'RANKWATCH_ERR_PATH', `a file where a folder is expected: ${at(e.path, 'a path')}`),
          exit: 2,
        };
      case 'ENOENT':
        return {
          line: line(cmd, 'RANKWATCH_ERR_PATH', `no such file or folder: ${at(e.path, 'a path')}`),
          exit: 2,
        };
      default: {
        // chDB: the folder is locked by another process (the engine names its `status` file), or
        // cannot be created or written.
        const path =
          /path '([^']+)'/.exec(String(e.message))?.[1] ??
          /lock file (\S+?)\/status/.exec(String(e.message))?.[1];
        return {
          line: line(
            cmd,
            'RANKWATCH_ERR_DATA_IN_USE',
            `cannot open the chDB data folder (held by another process, or not writable): ${at(path, '--data')}`,
          ),
          exit: 1,
        };
      }
    }
  }
  const message = err instanceof Error ? err.message : String(err);
  return {
    line: `rankwatch ${cmd}: ${message.split('\n')[0]} (unexpected: run with RANKWATCH_DEBUG=1 for the stack trace, and please report it)`,
    exit: 1,
  };
}
