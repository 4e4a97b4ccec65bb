import { describe, expect, it } from 'vitest';
import { CusumTable } from './state.js';

describe('CusumTable cold slots', () => {
  it('gives a row a slot only while it is active, and a reused slot starts fresh', () => {
    const t = new CusumTable();
    const a = t.add();
    const b = t.add();
    expect(t.act[a]).toBe(-1); // a fresh row holds no cold slot
    const ca = t.activate(a);
    expect(t.activate(a)).toBe(ca); // once per row
    t.s[a] = 3;
    t.onsetStep[ca] = 42;
    t.hits[ca] = 2;
    t.worstKey[ca] = 'allreduce:dp.s0.t0';
    t.release(a); // its CUSUM is off zero: it keeps the slot
    expect(t.act[a]).toBe(ca);
    t.s[a] = 0;
    t.release(a);
    expect(t.act[a]).toBe(-1);
    const cb = t.activate(b);
    expect(cb).toBe(ca); // the slot is reused...
    expect(t.onsetStep[cb]).toBe(0); // ...with nothing of the row that held it
    expect(t.hits[cb]).toBe(0);
    expect(t.worstKey[cb]).toBeUndefined();
    expect(Number.isNaN(t.pendingSince[cb])).toBe(true);
    expect(t.slots).toBe(1);
  });

  it('keeps the slot of a row that is flagged, flapping or waiting as a pair', () => {
    const t = new CusumTable();
    const r = t.add();
    const c = t.activate(r);
    t.flagged[r] = 1;
    t.release(r);
    expect(t.act[r]).toBe(c);
    t.flagged[r] = 0;
    t.flap[r] = 0.5;
    t.release(r);
    expect(t.act[r]).toBe(c);
    t.flap[r] = 0;
    t.pendingSince[c] = 17; // a pair decision still reads its onset
    t.release(r);
    expect(t.act[r]).toBe(c);
    t.pendingSince[c] = Number.NaN;
    t.release(r);
    expect(t.act[r]).toBe(-1);
  });

  it('grows rows and slots past their first capacity, keeping what they hold', () => {
    const t = new CusumTable();
    for (let i = 0; i < 200; i++) {
      const r = t.add();
      t.src[r] = i;
      const c = t.activate(r);
      t.onsetStep[c] = i;
    }
    expect(t.size).toBe(200);
    for (let i = 0; i < 200; i++) {
      expect(t.src[i]).toBe(i);
      expect(t.onsetStep[t.act[i]]).toBe(i);
      expect(t.lastHit[i]).toBe(Number.NEGATIVE_INFINITY);
    }
  });
});
