import { describe, expect, it } from 'vitest';
import { type LinkKind, StepLinks } from './links.js';

const kind: LinkKind = {
  family: 'allreduce',
  nranks: 8,
  band: 13,
  kind: 'allreduce:8:13',
  kindNvlink: 'allreduce:8:13:nvlink',
};
const p2p: LinkKind = { family: 'p2p', nranks: 2, band: 13, kind: 'p2p:2:13', kindNvlink: 'p2p:2:13:nvlink' };

describe('StepLinks', () => {
  it("holds a step's collectives and edges, and a reused table keeps nothing of the last step", () => {
    const L = new StepLinks();
    const c = L.add(kind, 1 << 26, 1.75, true, -1, -1);
    L.key[c] = 'allreduce:tp.s0.d0';
    for (const r of [3, 4, 5, 3]) L.addRail(c, r);
    L.durMin[c] = 2.5;
    L.z[c] = 9;
    const e = L.add(p2p, 1 << 20, 1, false, 7, 9);
    expect(L.railCount(c)).toBe(3); // a rank reporting the same communicator twice is one rail
    expect(L.railCount(e)).toBe(2);
    expect(L.hasRail(c, 4)).toBe(true);
    expect(L.hasRail(e, 9)).toBe(true);
    expect(L.hasRail(e, 4)).toBe(false);
    expect(L.sharesRail(c, e)).toBe(false);
    const e2 = L.add(p2p, 1 << 20, 1, false, 5, 11);
    expect(L.sharesRail(e2, c)).toBe(true);

    L.reset();
    expect(L.size).toBe(0);
    const again = L.add(kind, 1 << 26, 1.75, true, -1, -1);
    expect(again).toBe(c); // same slot...
    expect(L.railCount(again)).toBe(0); // ...emptied
    expect(L.hasRail(again, 4)).toBe(false);
    expect(L.durMin[again]).toBe(Number.POSITIVE_INFINITY);
    expect(L.z[again]).toBe(0);
    expect(L.key[again]).toBeUndefined();
    expect(L.intra[again]).toBeUndefined();
    const edge = L.add(p2p, 1 << 20, 1, false, 1, 2);
    expect([L.row[edge], L.win[edge], L.nextNew[edge], L.next[edge], L.to[edge]]).toEqual([
      -1, -1, -1, -1, -1,
    ]);
  });

  it("lists each collective's rails once, in first-report order, across interleaved reports and growth", () => {
    const L = new StepLinks();
    const groups = 64;
    const links = Array.from({ length: groups }, () => L.add(kind, 1 << 26, 1.75, true, -1, -1));
    // Every rail reports to two collectives, three times each, interleaved: 6,144 reports, 2,048 members.
    for (let round = 0; round < 3; round++)
      for (let r = 0; r < 1024; r++) {
        L.addRail(links[r % groups], r);
        L.addRail(links[(r * 7 + 3) % groups], r);
      }
    const railsOf = (l: number) => {
      const out: number[] = [];
      for (let m = L.memberHead[l]; m >= 0; m = L.memberNext[m]) out.push(L.memberRail[m]);
      return out;
    };
    for (let g = 0; g < groups; g++) {
      const expected: number[] = [];
      for (let r = 0; r < 1024; r++)
        if ((r % groups === g || (r * 7 + 3) % groups === g) && !expected.includes(r)) expected.push(r);
      expect(railsOf(links[g])).toEqual(expected);
      expect(L.railCount(links[g])).toBe(expected.length);
      expect(L.hasRail(links[g], expected[0])).toBe(true);
    }
    expect(L.hasRail(links[0], 1)).toBe(false);
    L.reset();
    const c = L.add(kind, 1 << 26, 1.75, true, -1, -1);
    L.addRail(c, 5);
    expect(railsOf(c)).toEqual([5]);
  });

  it('grows past its first capacity without losing links', () => {
    const L = new StepLinks();
    for (let i = 0; i < 1000; i++) {
      const l = L.add(p2p, i, 1, false, i, i + 1);
      L.durMin[l] = i;
    }
    expect(L.size).toBe(1000);
    for (let i = 0; i < 1000; i++)
      expect([L.src[i], L.dst[i], L.durMin[i], L.bytes[i]]).toEqual([i, i + 1, i, i]);
  });
});
