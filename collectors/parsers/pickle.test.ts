import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PickleError, type PyValue, readPickle } from './pickle.js';

const dir = join(import.meta.dirname, 'fixtures', 'flight-recorder');
const bytes = (...b: (number | string)[]) =>
  Uint8Array.from(b.flatMap((x) => (typeof x === 'string' ? [...Buffer.from(x, 'latin1')] : [x])));
const obj = (v: PyValue) => v as { [k: string]: PyValue };

describe('readPickle on real Flight Recorder dumps', () => {
  it('reads what PyTorch’s C++ pickler wrote (protocol 2, memo shared strings)', () => {
    const d = obj(readPickle(readFileSync(join(dir, 'gloo-hang', 'rank_0'))));
    expect(d.version).toBe('2.10');
    expect(Object.getPrototypeOf(d)).toBeNull();
    const entries = d.entries as PyValue[];
    expect(entries).toHaveLength(6);
    const last = obj(entries[5]);
    expect(last.profiling_name).toBe('gloo:all_reduce');
    expect(last.process_group).toEqual(['0', 'default_pg']);
    expect(last.input_sizes).toEqual([[3, 4]]);
    // time_created_ns is past 2^53: kept exact as a bigint.
    expect(typeof last.time_created_ns).toBe('bigint');
    expect(last.time_discovered_completed_ns).toBeNull();
    expect(obj(obj(d.pg_status)['0']).last_started_collective).toBe(-1);
  });

  it('reads the same data written again by Python’s pickle (protocol 5: FRAME, MEMOIZE, SHORT_BINUNICODE)', () => {
    const cpp = readPickle(readFileSync(join(dir, 'gloo-hang', 'rank_1')));
    const py = readPickle(readFileSync(join(dir, 'python-pickle-p5', 'rank_1')));
    expect(py).toEqual(cpp);
  });
});

describe('readPickle refuses what it must not do', () => {
  // pickle.dumps(os.system) and a classic payload: GLOBAL 'os system', then REDUCE.
  it('refuses GLOBAL (an import) with a clear reason, before anything else happens', () => {
    const evil = bytes("cos\nsystem\n(S'echo pwned'\ntR.");
    expect(() => readPickle(evil)).toThrow(/refused opcode GLOBAL: it would import or call Python code/);
  });

  it('refuses STACK_GLOBAL, REDUCE, BUILD, NEWOBJ, INST, OBJ, EXT and persistent ids', () => {
    const cases: [number[], string][] = [
      [[0x80, 4, 0x8c, 1, 0x6f, 0x8c, 1, 0x73, 0x93], 'STACK_GLOBAL'],
      [[0x80, 2, 0x5d, 0x29, 0x52], 'REDUCE'],
      [[0x80, 2, 0x7d, 0x7d, 0x62], 'BUILD'],
      [[0x80, 2, 0x5d, 0x29, 0x81], 'NEWOBJ'],
      [[0x69, ...Buffer.from('os\nsystem\n')], 'INST'],
      [[0x28, 0x6f], 'OBJ'],
      [[0x82, 1], 'EXT1'],
      [[0x51], 'BINPERSID'],
      [[0x80, 5, 0x97], 'NEXT_BUFFER'],
    ];
    for (const [b, name] of cases)
      expect(() => readPickle(Uint8Array.from(b))).toThrow(`refused opcode ${name}`);
  });

  it('never allocates what the input does not hold: a 4 GiB string header in a 10-byte file', () => {
    const huge = bytes(0x80, 2, 0x58, 0xff, 0xff, 0xff, 0xff, 'ab');
    expect(() => readPickle(huge)).toThrow(/input ends inside an opcode/);
    const huge8 = bytes(0x80, 4, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f);
    expect(() => readPickle(huge8)).toThrow(/length larger than the input/);
  });

  it('bounds integer width, nesting and memo size', () => {
    expect(() => readPickle(bytes(0x8b, 0, 0, 1, 0, ...new Array(64).fill(0)))).toThrow(
      /integer of 65536 bytes/,
    );
    expect(() => readPickle(bytes(...new Array(300).fill(0x28)))).toThrow(/nesting deeper than 256/);
    const puts = [0x5d];
    for (let i = 0; i < 20; i++) puts.push(0x71, i);
    expect(() => readPickle(Uint8Array.from([...puts, 0x2e]), { maxMemo: 10 })).toThrow(
      /more than 10 memo entries/,
    );
  });

  it('says where a cut or garbled pickle fails, never returns half a value', () => {
    const real = readFileSync(join(dir, 'gloo-size', 'rank_0'));
    const cut = real.subarray(0, real.length - 40);
    expect(() => readPickle(cut)).toThrow(PickleError);
    expect(() => readPickle(bytes('hello world'))).toThrow(PickleError);
    expect(() => readPickle(bytes(0x80, 2, 0x68, 7, 0x2e))).toThrow(/memo entry 7 was never stored/);
    expect(() => readPickle(bytes(0x80, 2, 0x4e, 0x4e, 0x2e))).toThrow(/values left on the stack/);
    expect(() => readPickle(bytes(0x80, 2, 0x7d, 0x5d, 0x4e, 0x73, 0x2e))).toThrow(/dict key that is not/);
  });

  it('keeps a "__proto__" key as plain data', () => {
    // {'__proto__': 1} from pickle.dumps(..., protocol=2)
    const p = bytes(0x80, 2, 0x7d, 0x71, 0, 0x58, 9, 0, 0, 0, '__proto__', 0x71, 1, 0x4b, 1, 0x73, 0x2e);
    const d = obj(readPickle(p));
    expect(Object.keys(d)).toEqual(['__proto__']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('reads text opcodes of protocol 0 (ints, longs, floats, strings, True/False)', () => {
    // pickle.dumps([1, 2**70, 1.5, 'a', True], protocol=0)
    const p = bytes('(lp0\nI1\naL1180591620717411303424L\naF1.5\naVa\np1\naI01\na.');
    expect(readPickle(p)).toEqual([1, 2n ** 70n, 1.5, 'a', true]);
  });
});
