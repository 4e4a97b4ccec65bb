import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { flightRecorder } from './flight_recorder.js';
import { recordingDeps, until } from './recording-deps.js';

const fixtures = join(import.meta.dirname, '..', 'parsers', 'fixtures', 'flight-recorder');
const root = mkdtempSync(join(tmpdir(), 'rankwatch-fr-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const deps = () => recordingDeps();
const copyDumps = (from: string, to: string, only?: (f: string) => boolean) => {
  mkdirSync(to, { recursive: true });
  for (const f of readdirSync(join(fixtures, from)).filter(only ?? (() => true)))
    copyFileSync(join(fixtures, from, f), join(to, f));
};
const cfg = (path: string) => ({
  type: 'flight_recorder' as const,
  path,
  pollMs: 100,
  settleMs: 300,
  staleMs: 600_000,
  maxFileBytes: 1 << 20,
  job: 'j1',
});

describe('flight_recorder source', () => {
  it('names the rank that never joined once every rank’s dump is there, and only once', async () => {
    const dir = join(root, 'hang');
    const { d, events, problems, errors } = deps();
    const s = flightRecorder.create(cfg(dir), d);
    mkdirSync(dir);
    s.start();
    // Ranks 0-2 dump first; rank 3 a moment later: nothing may be judged on a partial set.
    copyDumps('gloo-hang-4ranks', dir, (f) => f !== 'rank_3');
    await new Promise((r) => setTimeout(r, 150));
    copyDumps('gloo-hang-4ranks', dir, (f) => f === 'rank_3');
    await until(() => events.length >= 1);
    // The set is read again when a file changes; the same problem is not sent twice.
    writeFileSync(join(dir, 'notes.txt'), 'copied from the job’s /tmp\n');
    await new Promise((r) => setTimeout(r, 800));
    await s.stop();
    expect(errors).toEqual([]);
    expect(problems).toEqual([]);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      kind: 'fault',
      source: 'flight_recorder',
      fr: 'not_joined',
      rank: 3,
      job: 'j1',
      host: 'this-node',
      host_source: 'collector',
      seq: 5,
      pg: '0',
      pg_name: '0',
      pg_desc: 'default_pg',
      op: 'allreduce',
      op_raw: 'gloo:all_reduce',
      missing_ranks: [3],
      expected_ranks: [0, 1, 2, 3],
    });
    expect(validateEvent(events[0])).toMatchObject({ ok: true });
  });

  it('each sub-folder is one dump set; a broken dump is a problem naming its file; an analyzer report is read too', async () => {
    const dir = join(root, 'many');
    copyDumps('gloo-size', join(dir, 'job-a'));
    copyDumps('gloo-dtype', join(dir, 'job-b'));
    writeFileSync(join(dir, 'job-b', 'rank_7'), Buffer.from([0x80, 2, 0x63, 0x6f, 0x73]));
    copyFileSync(join(fixtures, 'fr_trace-pr140969.txt'), join(dir, 'report.txt'));
    const { d, events, problems } = deps();
    const s = flightRecorder.create(cfg(dir), d);
    s.start();
    await until(() => events.length >= 7);
    await s.stop();
    expect(events.map((e) => [e.fr, e.rank, e.seq]).sort()).toEqual(
      [
        ['dtype_mismatch', 1, 5],
        ['size_mismatch', 1, 5],
        ...[3, 4, 5, 6, 7].map((r) => ['not_joined', r, 31117]),
      ].sort(),
    );
    expect(problems.map((p) => p.reason)).toEqual([
      expect.stringMatching(/job-b\/rank_7: not a Flight Recorder dump we can read: refused opcode GLOBAL/),
    ]);
    for (const e of events) expect(validateEvent(e)).toMatchObject({ ok: true });
  });

  it('a path that is not there is a source error, retried until it appears', async () => {
    const dir = join(root, 'later');
    const { d, events, errors } = deps();
    const s = flightRecorder.create(cfg(dir), d);
    s.start();
    await until(() => errors.length >= 1);
    copyDumps('gloo-type', dir);
    await until(() => events.length >= 1);
    await s.stop();
    expect(errors[0]).toMatch(/cannot read .*later: ENOENT/);
    expect(events.map((e) => [e.fr, e.rank])).toEqual([['type_mismatch', 1]]);
  });

  it('a stale dump of an earlier run next to the new ones is left out, not blamed', async () => {
    const dir = join(root, 'stale');
    copyDumps('gloo-hang-4ranks', dir);
    // Rank 3's file is an hour older than its peers': not this incident's.
    const old = new Date(Date.now() - 3_600_000);
    utimesSync(join(dir, 'rank_3'), old, old);
    const { d, events, problems } = deps();
    const s = flightRecorder.create(cfg(dir), d);
    s.start();
    await until(() => problems.length >= 1);
    await new Promise((r) => setTimeout(r, 300));
    await s.stop();
    expect(events).toEqual([]);
    expect(problems.map((p) => p.reason)).toEqual([
      expect.stringMatching(/^rank_3: 36\d\d s older than the newest file of its folder; left out$/),
    ]);
  });
});
