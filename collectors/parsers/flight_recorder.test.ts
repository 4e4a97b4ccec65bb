import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { collectiveOp } from './collective_op.js';
import { analyzeFr, type FrDump, type FrProblem, frFaultEvent, readFrDump } from './flight_recorder.js';
import { parseFrReport } from './fr_report.js';

const dir = join(import.meta.dirname, 'fixtures', 'flight-recorder');
const text = (name: string) => readFileSync(join(dir, name), 'utf8');

function load(sub: string): FrDump[] {
  return readdirSync(join(dir, sub)).map((f) => {
    const r = readFrDump(readFileSync(join(dir, sub, f)), f);
    expect(r.problems).toEqual([]);
    return r.dump!;
  });
}
/** What both the dumps and the report can say about a problem. */
const gist = (p: FrProblem) => [p.fr, p.rank, p.seq, p.pgName, p.pgDesc, p.opRaw && collectiveOp(p.opRaw)];

describe('Flight Recorder dumps (real, from PyTorch 2.15 gloo jobs)', () => {
  it('reads each rank’s entries: rank from the file name, sizes, dtypes, groups, times', () => {
    const [d] = load('gloo-dtype').filter((x) => x.rank === 1);
    expect(d.version).toBe('2.10');
    // torch 2.15's gloo recorder writes pg_config under an empty name: nothing usable.
    expect(d.groups.size).toBe(0);
    const last = d.entries.at(-1)!;
    expect([last.pgName, last.pgDesc, last.seq, last.inputDtypes, last.state]).toEqual([
      '0',
      'default_pg',
      5,
      ['Double'],
      'scheduled',
    ]);
    expect(last.createdMs).toBeGreaterThan(Date.UTC(2024, 0, 1));
  });

  // Our analysis of the dumps must name what PyTorch's own analyzer names for the same dumps.
  for (const s of ['hang', 'hang-4ranks', 'size', 'dtype', 'type'])
    it(`${s}: finds what fr_trace reports for the same dumps`, () => {
      const ours = analyzeFr(load(`gloo-${s}`));
      const theirs = parseFrReport(text(`fr_trace-gloo-${s}.txt`));
      expect(theirs.parseProblems).toEqual([]);
      expect(ours.length).toBeGreaterThan(0);
      expect(ours.map(gist)).toEqual(theirs.problems.map(gist));
    });

  it('a hang names the rank that never arrived, its group, the peers’ call site and when they entered', () => {
    const [p] = analyzeFr(load('gloo-hang-4ranks'));
    expect(p).toMatchObject({
      fr: 'not_joined',
      rank: 3,
      missingRanks: [3],
      expectedRanks: [0, 1, 2, 3],
      membershipInferred: true,
      seq: 5,
      pg: '0',
    });
    expect(p.callSite).toMatch(/^run at .*make_dumps\.py:\d+$/);
    expect(p.enteredMs).toBeGreaterThan(Date.UTC(2024, 0, 1));
  });

  it('does not judge collectives older than a rank’s ring buffer (wrapped), nor blame ranks without a dump', () => {
    const dumps = load('gloo-hang-4ranks');
    // Rank 0's buffer lost its first 3 entries: collectives 1-3 can no longer be matched, 5 still can.
    dumps[0].entries = dumps[0].entries.slice(3);
    expect(analyzeFr(dumps).map((p) => [p.rank, p.seq])).toEqual([[3, 5]]);
    // Without rank 3's dump nobody can be shown to have missed collective 5.
    expect(analyzeFr(load('gloo-hang-4ranks').filter((d) => d.rank !== 3))).toEqual([]);
  });

  it('a clean dump set shows nothing', () => {
    const dumps = load('gloo-hang').map((d) => ({ ...d, entries: d.entries.filter((e) => e.seq < 5) }));
    expect(analyzeFr(dumps)).toEqual([]);
  });

  it('uses pg_config members when the dumps have them (NCCL), and the majority as the reference', () => {
    const dumps = load('gloo-hang-4ranks').map((d) => ({ ...d, groups: new Map([['0', [0, 1, 2, 3]]]) }));
    // Ranks 1 and 2 send 4x5 at collective 2, ranks 0 and 3 send 3x4: a tie goes to the lowest rank.
    for (const d of dumps.filter((x) => x.rank === 1 || x.rank === 2))
      d.entries[1] = { ...d.entries[1], inputSizes: [[4, 5]] };
    expect(analyzeFr(dumps).map((p) => [p.fr, p.rank, p.seq, p.membershipInferred])).toEqual([
      ['size_mismatch', 1, 2, undefined],
      ['size_mismatch', 2, 2, undefined],
    ]);
  });

  it('a damaged or foreign file is a problem naming the file, never an exception', () => {
    const real = readFileSync(join(dir, 'gloo-size', 'rank_0'));
    expect(readFrDump(real.subarray(0, 700), 'rank_0').problems[0].reason).toMatch(
      /^rank_0: not a Flight Recorder/,
    );
    // pickle.dumps([1, 2]): a pickle, but not a dump.
    const list = Uint8Array.from([0x80, 2, 0x5d, 0x71, 0, 0x28, 0x4b, 1, 0x4b, 2, 0x65, 0x2e]);
    expect(readFrDump(list, 'rank_1').problems[0].reason).toMatch(/not a Flight Recorder dump/);
    expect(readFrDump(real, 'trace').problems[0].reason).toMatch(/no rank/);
  });

  it('fault events validate against the contract and say the host is the collector’s', () => {
    for (const s of ['hang', 'size', 'dtype', 'type']) {
      for (const p of analyzeFr(load(`gloo-${s}`))) {
        const e = frFaultEvent(p, 1_764_480_000_000, { host: 'node-7', job: 'j1' }, `gloo-${s}/`);
        expect(validateEvent(e)).toMatchObject({ ok: true });
        expect(e).toMatchObject({
          source: 'flight_recorder',
          host: 'node-7',
          host_source: 'collector',
          job: 'j1',
        });
      }
    }
    const [size] = analyzeFr(load('gloo-size'));
    const e = frFaultEvent(size, 1, { host: 'h' }, 'gloo-size/');
    expect(e).toMatchObject({
      fr: 'size_mismatch',
      error_type: 'SIZE_OR_SYNTAX_MISMATCH',
      rank: 1,
      op: 'allreduce',
    });
    expect(e.message).toMatch(
      /rank 1: size mismatch in gloo:all_reduce #5 of process group 0 \(default_pg\): input sizes \[\[4, 5\]\] where the others have \[\[3, 4\]\]/,
    );
  });
});
