/**
 * A JSON.parse for the lines nearly every event is written as: one flat object of plain keys and
 * scalar values, `{"v":1,"kind":"step","ts":…,"host":"gpu-0007",…}`, whose keys come in an order
 * seen before (`learn`). It reads the values straight from the line's bytes into the object
 * JSON.parse would build (same keys, same order, same values) and answers undefined for anything
 * else, which the caller then hands to JSON.parse: another order of keys, escapes, nested values,
 * whitespace, exponents, bad JSON of any kind. So it needs no error messages of its own, and
 * whatever it accepts is exactly what JSON.parse gives.
 *
 * Why: JSON.parse alone costs about as much as the fastest plain read + parse loop, which leaves
 * replay no room for validation and the detectors inside issue 30's 0.8x of that loop. Here the
 * bytes are read from a typed array (several times faster than a string's characters), a key is
 * one comparison with the key the shape expects next, a number of up to 15 digits is computed
 * exactly in place, a string value seen before is the same string again (no allocation), and the
 * object comes from a literal of the shape's keys, which V8 allocates with its final hidden class.
 */

const QUOTE = 0x22;
const COMMA = 0x2c;
const MINUS = 0x2d;
const DOT = 0x2e;
const ZERO = 0x30;
const NINE = 0x39;
const CLOSE = 0x7d;
const BACKSLASH = 0x5c;

/** Every shape this reads starts so; the kind's name follows. */
const HEAD = '{"v":1,"kind":"';
const HEAD_BYTES = Buffer.from(HEAD, 'latin1');

/**
 * Exact powers of ten (10^22 is the largest a double holds exactly): a decimal of at most 15
 * significant digits is m / 10^k with both exact, and IEEE division rounds that quotient
 * correctly, as JSON.parse rounds the decimal (Clinger's fast path).
 */
const POW10 = Array.from({ length: 23 }, (_, k) => 10 ** k);

/**
 * String values seen before, by a hash of their bytes, two places per hash (the newer first; a
 * third value of the pair's hashes pushes the older out): hosts, jobs, ops, communicators and GPU
 * UUIDs repeat on nearly every line, a few thousand distinct ones in a 1,024-GPU job. A value is
 * a copy of its own, never a slice of the chunk of text the line came from, which a slice of 13
 * characters or more is in V8: kept in detector state (a long host name), it would keep that
 * whole chunk alive.
 */
const SLOTS = 16384;
const SLOT_BYTES = 64;
const seenText = new Array<string | undefined>(SLOTS).fill(undefined);
const seenBytes = new Uint8Array(SLOTS * SLOT_BYTES);

function stringAt(line: string, b: Uint8Array, from: number, to: number, at: number, hash: number): string {
  const len = to - from;
  if (len > SLOT_BYTES) return copyOf(line.slice(from - at, to - at));
  const slot = hash & (SLOTS - 2); // even: the pair's first place
  if (holds(slot, b, from, len)) return seenText[slot]!;
  if (holds(slot + 1, b, from, len)) return seenText[slot + 1]!;
  const made = copyOf(line.slice(from - at, to - at));
  seenText[slot + 1] = seenText[slot];
  seenBytes.copyWithin((slot + 1) * SLOT_BYTES, slot * SLOT_BYTES, (slot + 1) * SLOT_BYTES);
  seenText[slot] = made;
  seenBytes.set(b.subarray(from, to), slot * SLOT_BYTES);
  return made;
}

/** Whether the place holds the `len` bytes from `from`. */
function holds(slot: number, b: Uint8Array, from: number, len: number): boolean {
  const s = seenText[slot];
  if (s === undefined || s.length !== len) return false;
  const base = slot * SLOT_BYTES;
  for (let i = 0; i < len; i++) if (seenBytes[base + i] !== b[from + i]) return false;
  return true;
}

/** A flat string of its own (slice's view is one only from 13 characters); `s` holds no escapes. */
const copyOf = (s: string): string => (s.length < 13 ? s : (JSON.parse(`"${s}"`) as string));

/** One order of keys a kind's lines come in: each key's bytes as written, and the object's maker. */
interface Shape {
  /** `"key":` for each key after `v` and `kind`. */
  keys: Uint8Array[];
  names: string[];
  build: (kind: string, values: unknown[]) => Record<string, unknown>;
}

interface Kind {
  name: string;
  /** The name as written, with its closing quote and the comma after. */
  bytes: Uint8Array;
  shapes: Shape[];
  /** The shape tried first: the one the kind's last line read had. */
  last: number;
  /** How many leading keys each two shapes share, by their places in `shapes`. */
  shared: number[][];
}

/** Shapes kept per kind, and kinds: enough for a few writers per kind, bounded whatever comes. */
const SHAPES_PER_KIND = 4;
const KINDS_MAX = 16;
const kinds: Kind[] = [];
/** Shapes learnt in all: each compiles a function, so a stream of ever-new shapes stops the learning. */
const LEARNT_MAX = 64;
let learnt = 0;
const values: unknown[] = [];

/** A key this takes: a letter or `_`, then letters, digits, `_` (not "0", whose place differs). */
const PLAIN_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Learns the order of keys of an event JSON.parse read, when it is one this can read: flat, of
 * plain keys, `v` 1 and `kind` first.
 */
export function learn(parsed: unknown): void {
  if (learnt >= LEARNT_MAX || typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return;
  const o = parsed as Record<string, unknown>;
  const keys = Object.keys(o);
  const name = o.kind;
  if (keys[0] !== 'v' || keys[1] !== 'kind' || o.v !== 1 || typeof name !== 'string') return;
  if (!PLAIN_KEY.test(name)) return; // so that the kind as written is the kind read
  for (const k of keys) {
    const v = o[k];
    if (!PLAIN_KEY.test(k) || k === '__proto__' || (typeof v === 'object' && v !== null)) return;
  }
  let kind = kinds.find((k) => k.name === name);
  if (kind === undefined) {
    if (kinds.length >= KINDS_MAX) return;
    kind = { name, bytes: Buffer.from(`${name}",`, 'latin1'), shapes: [], last: 0, shared: [] };
    kinds.push(kind);
  }
  const rest = keys.slice(2);
  if (kind.shapes.some((s) => s.names.join() === rest.join())) return;
  if (kind.shapes.length >= SHAPES_PER_KIND) kind.shapes.pop();
  learnt++;
  // An object literal of the shape's keys (plain, checked above, so the source is only them).
  const fields = rest.map((k, i) => `${k}:a[${i}]`).join(',');
  kind.shapes.unshift({
    keys: rest.map((k) => Buffer.from(`"${k}":`, 'latin1')),
    names: rest,
    build: new Function('kind', 'a', `return {v:1,kind,${fields}};`) as Shape['build'],
  });
  kind.last = 0;
  kind.shared = kind.shapes.map((a) => kind.shapes.map((b) => sharedKeys(a.names, b.names)));
}

function sharedKeys(a: string[], b: string[]): number {
  let k = 0;
  while (k < a.length && k < b.length && a[k] === b[k]) k++;
  return k;
}

/**
 * The object JSON.parse(line) gives, when the line has a shape learnt and this reads it; else
 * undefined. `bytes` from `at` are the line's bytes, one per character (ASCII).
 *
 * The kind's last shape is tried first. Where the line leaves it (another key, or more keys), only
 * a shape with the same keys before that place can read the line, and it goes on from there: a
 * kind written in two shapes by turns (the simulator's collectives, with and without `peer`) has
 * each byte read once, not its shared keys again for the second shape.
 */
export function scanLine(line: string, bytes: Uint8Array, at: number): Record<string, unknown> | undefined {
  if (!startsWith(bytes, at, HEAD_BYTES)) return undefined;
  const from = at + HEAD_BYTES.length;
  for (let k = 0; k < kinds.length; k++) {
    const kind = kinds[k];
    if (!startsWith(bytes, from, kind.bytes)) continue;
    const list = kind.shapes;
    let s = kind.last;
    let tried = 0;
    let key = 0;
    let pos = from + kind.bytes.length;
    for (;;) {
      const end = read(line, bytes, at, pos, list[s].keys, key);
      if (end === READ) {
        kind.last = s;
        return list[s].build(kind.name, values);
      }
      if (end === BAD) return undefined;
      // The line's keys before `end` are this shape's, its key there is not: only a shape not
      // tried yet that shares exactly those keys may read the rest (one sharing more fails there too).
      tried |= 1 << s;
      const shared = kind.shared[s];
      let next = -1;
      for (let t = 0; t < list.length && next < 0; t++)
        if (shared[t] === end && !(tried & (1 << t))) next = t;
      if (next < 0) return undefined;
      s = next;
      key = end;
      pos = stoppedAt;
    }
  }
  return undefined;
}

function startsWith(b: Uint8Array, at: number, prefix: Uint8Array): boolean {
  for (let i = 0; i < prefix.length; i++) if (b[at + i] !== prefix[i]) return false;
  return true;
}

/** What `read` answers besides the key it stopped at: the line read, or a line no shape reads. */
const READ = -1;
const BAD = -2;
/** Where the key `read` stopped at starts (its comma, after the first). */
let stoppedAt = 0;

/**
 * Reads the values of `keys` from the `first`th, at `start`, into `values`, the line's end right
 * after: READ; BAD where no shape could read the line (a value that is not one this reads, bytes
 * after the object); else the index of the first key the line does not have here (`stoppedAt`
 * says where it starts), which is `keys.length` when the line has more keys.
 */
function read(
  line: string,
  b: Uint8Array,
  at: number,
  start: number,
  keys: Uint8Array[],
  first: number,
): number {
  const n = at + line.length;
  let pos = start;
  for (let k = first; k < keys.length; k++) {
    const key = keys[k];
    if ((k > 0 && b[pos] !== COMMA) || !startsWith(b, k > 0 ? pos + 1 : pos, key)) {
      stoppedAt = pos;
      return k;
    }
    pos += key.length + (k > 0 ? 1 : 0);
    const c = b[pos];
    if (c === QUOTE) {
      const from = ++pos;
      let hash = 0x811c9dc5; // FNV-1a
      for (let d = b[pos]; d !== QUOTE; d = b[++pos]) {
        if (d < 0x20 || d === BACKSLASH || pos >= n) return BAD; // undefined past the end
        hash = Math.imul(hash ^ d, 0x01000193);
      }
      values[k] = stringAt(line, b, from, pos, at, hash);
      pos++;
    } else if (c === MINUS || (c >= ZERO && c <= NINE)) {
      const from = pos;
      if (c === MINUS) pos++;
      let m = 0;
      let digits = 0;
      let d = b[pos];
      if (d === ZERO) {
        d = b[++pos];
        if (d >= ZERO && d <= NINE) return BAD; // a leading zero: not JSON
      } else if (d > ZERO && d <= NINE) {
        for (; d >= ZERO && d <= NINE; d = b[++pos], digits++) m = m * 10 + (d - ZERO);
      } else return BAD;
      let frac = 0;
      if (d === DOT) {
        d = b[++pos];
        if (!(d >= ZERO && d <= NINE)) return BAD;
        for (; d >= ZERO && d <= NINE; d = b[++pos], frac++) m = m * 10 + (d - ZERO);
      }
      if (d === 0x65 || d === 0x45) return BAD; // an exponent: left to JSON.parse
      // Up to 15 digits m is exact and so is m / 10^frac's rounding; past that, the engine's own
      // conversion, which is JSON.parse's (JSON's number grammar is a subset of Number's).
      // A small integer as such (a Smi, as JSON.parse gives it), not as a double.
      if (frac === 0 && digits < 10 && c !== MINUS) values[k] = m | 0;
      else
        values[k] =
          digits + frac <= 15
            ? (c === MINUS ? -m : m) / POW10[frac]
            : Number(line.slice(from - at, pos - at));
    } else if (c === 0x74 && b[pos + 1] === 0x72 && b[pos + 2] === 0x75 && b[pos + 3] === 0x65) {
      values[k] = true;
      pos += 4;
    } else if (
      c === 0x66 &&
      b[pos + 1] === 0x61 &&
      b[pos + 2] === 0x6c &&
      b[pos + 3] === 0x73 &&
      b[pos + 4] === 0x65
    ) {
      values[k] = false;
      pos += 5;
    } else if (c === 0x6e && b[pos + 1] === 0x75 && b[pos + 2] === 0x6c && b[pos + 3] === 0x6c) {
      values[k] = null;
      pos += 4;
    } else return BAD; // an object, an array, whitespace, or not JSON
  }
  if (b[pos] !== CLOSE) {
    stoppedAt = pos;
    return keys.length;
  }
  return pos + 1 === n ? READ : BAD;
}
