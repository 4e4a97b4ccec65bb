/**
 * Watches where PyTorch's Flight Recorder dumps land (TORCH_FR_DUMP_TEMP_FILE's folder; one pickle
 * per rank, written on a watchdog timeout or on demand), or one analyzer report file, and turns
 * what they show into `fault` events (source `flight_recorder`). No PyTorch needed on the node.
 *
 * The folder is polled (network filesystems miss inotify events). A dump set is read once it has
 * stopped changing for `settleMs` (ranks write their dumps one after another), then again whenever
 * a file in it changes; each problem is sent once for as long as the source runs. Every folder
 * (the path and its sub-folders, two levels down) is one job's dump set. A file that is neither a
 * dump nor a report is skipped; a dump that cannot be read is a parse problem naming the file.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { Type } from '@sinclair/typebox';
import {
  analyzeFr,
  type FrDump,
  type FrProblem,
  frFaultEvent,
  readFrDump,
} from '../parsers/flight_recorder.js';
import { looksLikeFrReport, parseFrReport } from '../parsers/fr_report.js';
import type { ParseProblem } from '../parsers/problems.js';
import { backoffMs, type SourceFactory, sourceName } from '../source.js';
import { repeat } from './repeat.js';

const MAX_FILES = 100_000;
const MAX_SEEN = 100_000;

const schema = Type.Object(
  {
    type: Type.Literal('flight_recorder'),
    name: Type.Optional(Type.String()),
    path: Type.String({
      description:
        'folder the per-rank dumps are written to (TORCH_FR_DUMP_TEMP_FILE’s), or one fr_trace report file',
    }),
    job: Type.Optional(Type.String({ description: 'job the dumps belong to' })),
    pollMs: Type.Integer({ minimum: 100, default: 2000, description: 'how often the path is looked at' }),
    settleMs: Type.Integer({
      minimum: 0,
      default: 5000,
      description: 'quiet time after the last change before a dump set is read (ranks dump one by one)',
    }),
    staleMs: Type.Integer({
      minimum: 0,
      default: 600_000,
      description:
        'a dump written this long before the newest of its folder is left out (a stale file of an earlier run)',
    }),
    maxFileBytes: Type.Integer({
      minimum: 1,
      default: 256 << 20,
      description:
        'a larger file is skipped and reported (a dump of 2000 entries with stack traces is a few MB)',
    }),
  },
  { additionalProperties: false },
);

interface Seen {
  path: string;
  size: number;
  mtimeMs: number;
}

/** Files under `root` (two levels of sub-folders), or `root` itself when it is a file. */
async function listFiles(root: string): Promise<Seen[]> {
  const st = await stat(root);
  if (!st.isDirectory()) return [{ path: root, size: st.size, mtimeMs: st.mtimeMs }];
  const out: Seen[] = [];
  const walk = async (dir: string, depth: number) => {
    for (const d of await readdir(dir, { withFileTypes: true })) {
      if (out.length >= MAX_FILES) return;
      const p = join(dir, d.name);
      if (d.isDirectory() && depth < 2) await walk(p, depth + 1);
      else if (d.isFile() && !d.name.startsWith('.')) {
        const s = await stat(p).catch(() => undefined);
        if (s) out.push({ path: p, size: s.size, mtimeMs: s.mtimeMs });
      }
    }
  };
  await walk(root, 0);
  return out.sort((a, b) => (a.path < b.path ? -1 : 1));
}

export const flightRecorder: SourceFactory<typeof schema> = {
  type: 'flight_recorder',
  description:
    'PyTorch Flight Recorder dumps (pickles, read without PyTorch) or its analyzer report → hang and mismatch faults',
  schema,
  create(cfg, deps) {
    const name = sourceName('flight_recorder', cfg.name);
    let lastSig = '';
    let changedAt = 0;
    let readSig = '';
    const seen = new Set<string>();
    const ctx = { host: deps.host, job: cfg.job };

    const readSet = async (dir: string, files: Seen[]) => {
      const problems: ParseProblem[] = [];
      const dumps: FrDump[] = [];
      const found: { p: FrProblem; from: string; ts: number }[] = [];
      const label = (f: Seen) => relative(cfg.path, f.path) || f.path;
      const newest = Math.max(...files.map((f) => f.mtimeMs));
      for (const f of files) {
        if (newest - f.mtimeMs > cfg.staleMs) {
          const age = Math.round((newest - f.mtimeMs) / 1000);
          problems.push({
            line: 0,
            reason: `${label(f)}: ${age} s older than the newest file of its folder; left out`,
            raw: '',
          });
          continue;
        }
        if (f.size > cfg.maxFileBytes) {
          problems.push({
            line: 0,
            reason: `${label(f)}: ${f.size} bytes, over maxFileBytes; skipped`,
            raw: '',
          });
          continue;
        }
        if (f.size === 0) continue;
        const buf = await readFile(f.path);
        if (buf[0] === 0x80) {
          const r = readFrDump(buf, f.path);
          problems.push(...r.problems);
          if (r.dump) dumps.push(r.dump);
          continue;
        }
        const text = buf.toString('utf8');
        if (!looksLikeFrReport(text)) continue;
        const r = parseFrReport(text);
        problems.push(...r.parseProblems.map((p) => ({ ...p, reason: `${label(f)}: ${p.reason}` })));
        for (const p of r.problems) found.push({ p, from: label(f), ts: Math.floor(f.mtimeMs) });
      }
      if (dumps.length) {
        const ts = Math.floor(Math.max(...files.map((f) => f.mtimeMs)));
        const from = `${dumps.length} dump(s) in ${relative(cfg.path, dir) || dir}`;
        for (const p of analyzeFr(dumps)) found.push({ p, from, ts });
      }
      if (problems.length) deps.parseProblems(name, problems);
      const events: unknown[] = [];
      for (const { p, from, ts } of found) {
        const key = [dir, p.fr, p.pg, p.pgName, p.pgDesc, p.seq, p.rank, p.errorType].join('|');
        if (seen.has(key)) continue;
        if (seen.size >= MAX_SEEN) seen.clear();
        seen.add(key);
        events.push(frFaultEvent(p, ts, ctx, from));
      }
      if (events.length) deps.emit(events);
    };

    const tick = async () => {
      const files = await listFiles(cfg.path);
      const sig = files.map((f) => `${f.path}:${f.size}:${f.mtimeMs}`).join('\n');
      const now = Date.now();
      if (sig !== lastSig) {
        lastSig = sig;
        changedAt = now;
      }
      if (sig === readSig || now - changedAt < cfg.settleMs) return;
      readSig = sig;
      const byDir = new Map<string, Seen[]>();
      for (const f of files) {
        const dir = dirname(f.path);
        byDir.set(dir, [...(byDir.get(dir) ?? []), f]);
      }
      for (const [dir, set] of byDir) await readSet(dir, set);
    };

    const input = repeat(
      name,
      deps,
      () =>
        tick().catch((err) => {
          throw new Error(`cannot read ${cfg.path}: ${(err as Error).message}`);
        }),
      {
        waitMs: () => cfg.pollMs,
        backoffMs: (n) => backoffMs(n, cfg.pollMs),
        recovered: `${cfg.path} is readable again`,
      },
    );
    return { type: 'flight_recorder', name, start: input.start, stop: input.stop };
  },
};
