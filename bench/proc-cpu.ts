/**
 * CPU time of benchmarked processes from /proc (Linux): user + system of a process, or of each of
 * its live threads by name. The benches report CPU rather than wall-clock time because this
 * machine is shared; threads that ended count in the process's total only.
 */
import { readdir, readFile } from 'node:fs/promises';

/** A `stat` line's utime + stime, in seconds (clock ticks of USER_HZ = 100). */
function statSeconds(stat: string): number {
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/** A process's CPU seconds so far, NaN once it is gone. */
export async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  return stat ? statSeconds(stat) : Number.NaN;
}

/** CPU seconds of a process's live threads, summed by thread name (the main thread as `main`). */
export async function threadCpuSeconds(pid: number): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const tid of await readdir(`/proc/${pid}/task`).catch(() => [] as string[])) {
    const stat = await readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8').catch(() => '');
    if (!stat) continue; // ended meanwhile
    const name = tid === String(pid) ? 'main' : stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    out.set(name, (out.get(name) ?? 0) + statSeconds(stat));
  }
  return out;
}

/** The value after `--NAME` on the command line, if given. */
export function argOption(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
}
