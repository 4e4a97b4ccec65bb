/**
 * The --auth file kept in force while `up` or `serve` runs, so tokens rotate without a restart:
 * re-read on SIGHUP and when it changes. Changes are found by polling its stat (once a second), which
 * sees an edit in place, a rename over it and a Kubernetes secret's symlink swap alike, where an
 * inotify watch on the old inode would not. A file that does not read, parse or validate keeps the
 * tokens in force and the log says why; so does one with no token at all, which would open every
 * route. At start and at each re-read, a file others may read (while it holds tokens themselves,
 * not sha256 digests) or anyone but its owner may write is warned about, whatever the listening
 * address: file modes keep out the machine's other users, and a loopback port is theirs to reach.
 */
import { type Stats, statSync, unwatchFile, watchFile } from 'node:fs';
import { dirname } from 'node:path';
import type { Logger } from '../core/log.js';
import { type AuthToken, loadAuthFile } from './auth.js';

export class WatchedAuthFile {
  private tokens: AuthToken[];

  /** Loads the file (a bad one is a RANKWATCH_ERR_CONFIG: the server does not start) and watches it. */
  constructor(
    readonly path: string,
    private readonly log: Logger,
    pollMs = 1000,
  ) {
    this.tokens = loadAuthFile(path);
    this.warnIfExposed();
    watchFile(path, { interval: pollMs, persistent: false }, this.changed);
  }

  /** The tokens in force now (for buildApp's auth.tokens). */
  readonly current = (): AuthToken[] => this.tokens;

  /** Reads the file again; returns whether its tokens are now in force. `why`: SIGHUP or change. */
  reload(why: string): boolean {
    let next: AuthToken[];
    try {
      next = loadAuthFile(this.path);
      if (next.length === 0) throw new Error('it lists no token, which would open every route');
    } catch (err) {
      const reason = (err as Error).message.replace(/^auth: /, '');
      this.log.warn(
        `auth: ${this.path} not re-read (${why}), keeping the ${this.tokens.length} token(s) in force: ${reason}`,
      );
      return false;
    }
    const change = describeChange(this.tokens, next);
    this.tokens = next;
    if (change || why === 'SIGHUP')
      this.log.info(
        `auth: ${this.path} re-read (${why}): ${next.length} token(s)${change ? `; ${change}` : ', unchanged'}`,
      );
    this.warnIfExposed();
    return true;
  }

  close(): void {
    unwatchFile(this.path, this.changed);
  }

  private readonly changed = (cur: Stats, prev: Stats) => {
    // A poll reports access-time changes too; only content, identity or mode matter.
    if (
      cur.mtimeMs === prev.mtimeMs &&
      cur.ctimeMs === prev.ctimeMs &&
      cur.ino === prev.ino &&
      cur.size === prev.size
    )
      return;
    this.reload('change');
  };

  private warnIfExposed(): void {
    for (const problem of exposure(
      this.path,
      this.tokens.some((t) => t.plaintext),
    ))
      this.log.warn(`auth: ${this.path} ${problem}`);
  }
}

/**
 * What the file's modes let other users do, one line each: read tokens (world-readable while it
 * holds tokens themselves), mint tokens (writable by its group or others), or swap the file (a
 * folder others may write without the sticky bit). A group that may read is a choice (a service
 * group); one that may write can give itself an admin token.
 */
export function exposure(path: string, plaintext: boolean): string[] {
  if (process.platform === 'win32') return [];
  const out: string[] = [];
  let mode: number;
  let dirMode: number;
  try {
    mode = statSync(path).mode;
    dirMode = statSync(dirname(path)).mode;
  } catch {
    return out;
  }
  const octal = (m: number) => (m & 0o7777).toString(8).padStart(4, '0');
  if (plaintext && mode & 0o004)
    out.push(
      `is readable by every user (mode ${octal(mode)}) and holds tokens themselves: chmod 600 it, or store their sha256 instead`,
    );
  if (mode & 0o022)
    out.push(
      `is writable by users other than its owner (mode ${octal(mode)}): they can give themselves any scope; chmod 600 it`,
    );
  if (dirMode & 0o022 && !(dirMode & 0o1000))
    out.push(
      `is in a folder users other than its owner may write (${dirname(path)}, mode ${octal(dirMode)}): they can replace the file; move it or chmod the folder`,
    );
  return out;
}

/** "added a, b; removed c; changed d" (names only), or '' when the tokens are the same. */
function describeChange(before: AuthToken[], after: AuthToken[]): string {
  const old = new Map(before.map((t) => [t.name, t]));
  const now = new Map(after.map((t) => [t.name, t]));
  const same = (a: AuthToken, b: AuthToken) =>
    a.digest.equals(b.digest) && [...a.scopes].sort().join() === [...b.scopes].sort().join();
  const parts: [string, string[]][] = [
    ['added', after.filter((t) => !old.has(t.name)).map((t) => t.name)],
    ['removed', before.filter((t) => !now.has(t.name)).map((t) => t.name)],
    [
      'changed',
      after.filter((t) => old.has(t.name) && !same(old.get(t.name) as AuthToken, t)).map((t) => t.name),
    ],
  ];
  return parts
    .filter(([, names]) => names.length > 0)
    .map(([what, names]) => `${what} ${names.join(', ')}`)
    .join('; ');
}
