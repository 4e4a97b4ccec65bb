/**
 * A safe reader of Python pickles that hold plain data only: dicts, lists, tuples, sets, strings,
 * bytes, ints (any size), floats, bools and None, with the memo. That is all PyTorch's Flight
 * Recorder writes (its C++ pickler: PROTO 2, EMPTY_DICT/MARK/SETITEMS, BINUNICODE, BININT*, LONG1,
 * TUPLE2, BINPUT/BINGET…) and all Python's own pickle writes for such data (FRAME, MEMOIZE,
 * SHORT_BINUNICODE… up to protocol 5).
 *
 * Nothing is ever imported, constructed or called: an opcode that would (GLOBAL, STACK_GLOBAL,
 * REDUCE, BUILD, INST, OBJ, NEWOBJ, EXT*, PERSID, out-of-band buffers) stops the read with a
 * PickleError naming it. Memory is bounded by the input: every opcode consumes at least one byte
 * and allocates at most one value or one reference, lengths are checked against the bytes left
 * before anything is allocated, and nesting, memo size and integer width have limits.
 *
 * Values: dict → a null-prototype object (keys as strings: an int key 3 becomes "3"; a tuple key
 * is refused), list/tuple/set → array, bytes → Uint8Array, int → number when it is exact in a
 * double, else bigint. Containers can be shared, even cyclic (the memo): read them by known shape,
 * never walk them generically, never mutate them.
 */

export type PyValue =
  | null
  | boolean
  | number
  | bigint
  | string
  | Uint8Array
  | PyValue[]
  | { [key: string]: PyValue };

export class PickleError extends Error {
  constructor(
    message: string,
    readonly offset: number,
  ) {
    super(`${message} (at byte ${offset})`);
    this.name = 'PickleError';
  }
}

export interface PickleLimits {
  /** Deepest nesting of MARKs and containers (default 256). */
  maxDepth?: number;
  /** Most memo entries (default 1,000,000). */
  maxMemo?: number;
  /** Widest integer, in bytes (default 64: Flight Recorder ints are 64-bit). */
  maxIntBytes?: number;
}

const MARK = Symbol('mark');
type Slot = PyValue | typeof MARK;

/** The opcodes that load code or objects, by byte, with their names (for the error). */
const REFUSED: Record<number, string> = {
  99: 'GLOBAL',
  147: 'STACK_GLOBAL',
  82: 'REDUCE',
  98: 'BUILD',
  105: 'INST',
  111: 'OBJ',
  129: 'NEWOBJ',
  146: 'NEWOBJ_EX',
  130: 'EXT1',
  131: 'EXT2',
  132: 'EXT4',
  80: 'PERSID',
  81: 'BINPERSID',
  151: 'NEXT_BUFFER',
  152: 'READONLY_BUFFER',
};

const utf8 = new TextDecoder('utf-8');
const latin1 = new TextDecoder('latin1');

/** Reads one pickle from `buf`; throws PickleError on anything unsafe, malformed or cut. */
export function readPickle(buf: Uint8Array, limits: PickleLimits = {}): PyValue {
  const maxDepth = limits.maxDepth ?? 256;
  const maxMemo = limits.maxMemo ?? 1_000_000;
  const maxIntBytes = limits.maxIntBytes ?? 64;
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const stack: Slot[] = [];
  /** Positions in `stack` where each open MARK sits. */
  const marks: number[] = [];
  const memo = new Map<number, PyValue>();
  let pos = 0;
  let op = 0;

  const fail = (msg: string): never => {
    throw new PickleError(msg, op);
  };
  const need = (n: number) => {
    if (n < 0 || pos + n > buf.length) fail(`input ends inside an opcode (needs ${n} more bytes)`);
  };
  const u8 = () => {
    need(1);
    return buf[pos++];
  };
  const u16 = () => {
    need(2);
    const v = view.getUint16(pos, true);
    pos += 2;
    return v;
  };
  const u32 = () => {
    need(4);
    const v = view.getUint32(pos, true);
    pos += 4;
    return v;
  };
  const u64 = () => {
    need(8);
    const v = view.getBigUint64(pos, true);
    pos += 8;
    if (v > BigInt(buf.length)) fail('length larger than the input');
    return Number(v);
  };
  const bytes = (n: number) => {
    need(n);
    const out = buf.subarray(pos, pos + n);
    pos += n;
    return out;
  };
  const line = () => {
    const end = buf.indexOf(0x0a, pos);
    if (end < 0) fail('input ends inside a text opcode');
    const s = latin1.decode(buf.subarray(pos, end));
    pos = end + 1;
    return s;
  };
  const push = (v: PyValue) => stack.push(v);
  const pop = (): PyValue => {
    const v = stack.pop();
    if (v === undefined) fail('stack underflow');
    if (v === MARK) fail('a value was expected, found a MARK');
    return v as PyValue;
  };
  const top = (): PyValue => {
    if (stack.length === 0 || stack[stack.length - 1] === MARK) fail('a value was expected on the stack');
    return stack[stack.length - 1] as PyValue;
  };
  /** Pops everything above the latest MARK, and the MARK. */
  const popMark = (): PyValue[] => {
    const at = marks.pop();
    if (at === undefined) fail('no MARK to pop to');
    const items = stack.splice(at!) as Slot[];
    items.shift();
    return items as PyValue[];
  };
  const memoize = (i: number, v: PyValue) => {
    if (memo.size >= maxMemo && !memo.has(i)) fail(`more than ${maxMemo} memo entries`);
    memo.set(i, v);
  };
  const recall = (i: number) => {
    const v = memo.get(i);
    if (v === undefined) fail(`memo entry ${i} was never stored`);
    return v as PyValue;
  };
  const int = (v: bigint): number | bigint =>
    v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
  /** Two's-complement little-endian, as LONG1/LONG4 store it. */
  const long = (n: number) => {
    if (n > maxIntBytes) fail(`integer of ${n} bytes (limit ${maxIntBytes})`);
    const b = bytes(n);
    let v = 0n;
    for (let i = n - 1; i >= 0; i--) v = (v << 8n) | BigInt(b[i]);
    if (n > 0 && b[n - 1] & 0x80) v -= 1n << BigInt(8 * n);
    return int(v);
  };
  const textInt = (s: string) => {
    const t = s.trim().replace(/L$/, '');
    if (!/^[+-]?\d+$/.test(t) || t.length > maxIntBytes * 3) fail(`bad integer "${s.slice(0, 20)}"`);
    return int(BigInt(t));
  };
  const container = () => {
    if (marks.length + 1 > maxDepth) fail(`nesting deeper than ${maxDepth}`);
  };
  const dictOf = (v: PyValue) => {
    if (v === null || typeof v !== 'object' || Array.isArray(v) || v instanceof Uint8Array)
      fail('SETITEM on something that is not a dict');
    return v as { [key: string]: PyValue };
  };
  const listOf = (v: PyValue) => {
    if (!Array.isArray(v)) fail('APPEND on something that is not a list');
    return v as PyValue[];
  };
  const key = (k: PyValue): string => {
    if (typeof k === 'string') return k;
    if (typeof k === 'number' || typeof k === 'bigint' || typeof k === 'boolean' || k === null)
      return String(k);
    return fail('a dict key that is not a string, number, bool or None');
  };
  const setItems = (d: { [key: string]: PyValue }, kv: PyValue[]) => {
    if (kv.length % 2) fail('SETITEMS with an odd number of items');
    for (let i = 0; i < kv.length; i += 2) d[key(kv[i])] = kv[i + 1];
  };
  const newDict = () => Object.create(null) as { [key: string]: PyValue };

  while (true) {
    op = pos;
    const code = u8();
    switch (code) {
      case 0x80: // PROTO
        if (u8() > 5) fail('pickle protocol newer than 5');
        break;
      case 0x95: // FRAME: a length hint only
        u64();
        break;
      case 0x2e: {
        // STOP
        const v = pop();
        if (stack.length || marks.length) fail('values left on the stack at STOP');
        return v;
      }
      case 0x28: // MARK
        container();
        marks.push(stack.length);
        stack.push(MARK);
        break;
      case 0x30: // POP
        if (marks.length && marks[marks.length - 1] === stack.length - 1) {
          marks.pop();
          stack.pop();
        } else pop();
        break;
      case 0x31: // POP_MARK
        popMark();
        break;
      case 0x32: // DUP
        push(top());
        break;
      case 0x4e: // NONE
        push(null);
        break;
      case 0x88: // NEWTRUE
        push(true);
        break;
      case 0x89: // NEWFALSE
        push(false);
        break;
      case 0x49: {
        // INT (text); protocol 0 writes True/False as I01/I00
        const s = line();
        push(s === '01' ? true : s === '00' ? false : textInt(s));
        break;
      }
      case 0x4a: // BININT
        need(4);
        push(view.getInt32(pos, true));
        pos += 4;
        break;
      case 0x4b: // BININT1
        push(u8());
        break;
      case 0x4d: // BININT2
        push(u16());
        break;
      case 0x4c: // LONG (text)
        push(textInt(line()));
        break;
      case 0x8a: // LONG1
        push(long(u8()));
        break;
      case 0x8b: // LONG4
        push(long(u32()));
        break;
      case 0x46: {
        // FLOAT (text)
        const s = line().trim();
        const v = Number(s);
        if (s === '' || (Number.isNaN(v) && !/^[+-]?nan$/i.test(s))) fail(`bad float "${s.slice(0, 20)}"`);
        push(v);
        break;
      }
      case 0x47: // BINFLOAT (big-endian)
        need(8);
        push(view.getFloat64(pos, false));
        pos += 8;
        break;
      case 0x58: // BINUNICODE
        push(utf8.decode(bytes(u32())));
        break;
      case 0x8c: // SHORT_BINUNICODE
        push(utf8.decode(bytes(u8())));
        break;
      case 0x8d: // BINUNICODE8
        push(utf8.decode(bytes(u64())));
        break;
      case 0x56: // UNICODE (raw-unicode-escape, text)
        push(
          line().replace(/\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})/g, (_m, a, b) =>
            String.fromCodePoint(Number.parseInt(a ?? b, 16)),
          ),
        );
        break;
      case 0x53: {
        // STRING (Python 2 str, quoted text)
        const s = line().trim();
        if (s.length < 2 || s[0] !== s[s.length - 1] || !`'"`.includes(s[0])) fail('bad STRING');
        push(s.slice(1, -1));
        break;
      }
      case 0x54: // BINSTRING
        push(latin1.decode(bytes(u32())));
        break;
      case 0x55: // SHORT_BINSTRING
        push(latin1.decode(bytes(u8())));
        break;
      case 0x42: // BINBYTES
        push(bytes(u32()).slice());
        break;
      case 0x43: // SHORT_BINBYTES
        push(bytes(u8()).slice());
        break;
      case 0x8e: // BINBYTES8
      case 0x96: // BYTEARRAY8
        push(bytes(u64()).slice());
        break;
      case 0x5d: // EMPTY_LIST
      case 0x29: // EMPTY_TUPLE
      case 0x8f: // EMPTY_SET
        push([]);
        break;
      case 0x7d: // EMPTY_DICT
        push(newDict());
        break;
      case 0x6c: // LIST
      case 0x74: // TUPLE
      case 0x91: // FROZENSET
        push(popMark());
        break;
      case 0x85: // TUPLE1
        push([pop()]);
        break;
      case 0x86: {
        // TUPLE2
        const b = pop();
        push([pop(), b]);
        break;
      }
      case 0x87: {
        // TUPLE3
        const c = pop();
        const b = pop();
        push([pop(), b, c]);
        break;
      }
      case 0x61: {
        // APPEND
        const v = pop();
        listOf(top()).push(v);
        break;
      }
      case 0x65: // APPENDS
      case 0x90: {
        // ADDITEMS
        const items = popMark();
        const list = listOf(top());
        for (const v of items) list.push(v);
        break;
      }
      case 0x64: {
        // DICT
        const d = newDict();
        setItems(d, popMark());
        push(d);
        break;
      }
      case 0x73: {
        // SETITEM
        const v = pop();
        const k = pop();
        dictOf(top())[key(k)] = v;
        break;
      }
      case 0x75: {
        // SETITEMS
        const kv = popMark();
        setItems(dictOf(top()), kv);
        break;
      }
      case 0x70: // PUT (text index)
        memoize(Number(textInt(line())), top());
        break;
      case 0x71: // BINPUT
        memoize(u8(), top());
        break;
      case 0x72: // LONG_BINPUT
        memoize(u32(), top());
        break;
      case 0x94: // MEMOIZE
        memoize(memo.size, top());
        break;
      case 0x67: // GET (text index)
        push(recall(Number(textInt(line()))));
        break;
      case 0x68: // BINGET
        push(recall(u8()));
        break;
      case 0x6a: // LONG_BINGET
        push(recall(u32()));
        break;
      default:
        if (REFUSED[code])
          fail(
            `refused opcode ${REFUSED[code]}: it would import or call Python code; only plain data is read`,
          );
        fail(`unknown opcode 0x${code.toString(16).padStart(2, '0')}`);
    }
  }
}
