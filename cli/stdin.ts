/**
 * The chDB engine reads a piped stdin as the data of every insert (and refuses inserts while one
 * is attached: "Processing async inserts with both inlined and external data"). Commands that open
 * a chDB folder therefore copy the stdin they read to a file first, and point fd 0 at /dev/null.
 */
import { closeSync, createWriteStream, fstatSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';

/** Copies all of stdin to a temporary file and returns its path (read it instead of "-"). */
export async function stdinToFile(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-stdin-'));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'stdin');
  await pipeline(process.stdin, createWriteStream(file));
  return file;
}

/** Points fd 0 at /dev/null when it is a pipe or socket, so the engine sees no stdin. */
export function detachPipedStdin(): void {
  try {
    const st = fstatSync(0);
    if (!st.isFIFO() && !st.isSocket()) return;
    closeSync(0);
    openSync('/dev/null', 'r'); // the lowest free descriptor: 0 again
  } catch {
    // No fd 0 at all: nothing the engine could read either.
  }
}
