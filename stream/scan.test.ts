import { isAscii } from 'node:buffer';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { writeFieldMixFile } from '../bench/field-mix.js';
import { Random } from '../core/random.js';
import { eventProblem } from '../schema/validate.js';
import { ClusterSim } from '../sim/cluster.js';
import { parseFault } from '../sim/faults.js';
import { decodeBatch } from './codec.js';
import { FileTransport } from './file.js';
import { readLineChunks } from './lines.js';
import { learn, scanLine } from './scan.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-scan-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The lines of real shapes: the simulator's (a link fault for send/recv) and the field's mix. */
async function realLines(): Promise<string[]> {
  const sim = new ClusterSim({
    ranks: 16,
    steps: 4,
    seed: 3,
    faults: [parseFault('link:rank=3,peer=11,at=1'), parseFault('xid:rank=5,at=2')],
  });
  const lines = [...sim.events()].map((e) => JSON.stringify(e));
  const field = join(dir, 'field.jsonl');
  writeFieldMixFile(field, 32, 2);
  for await (const chunk of readLineChunks(field)) lines.push(...chunk.lines.filter((l) => l.length > 0));
  return lines;
}

/** Number texts, valid JSON and not: signs, zeros, fractions, exponents, past 15 digits and 2^53. */
const NUMBERS = [
  '0',
  '-0',
  '-0.0',
  '00',
  '01',
  '-01',
  '1.',
  '.5',
  '+1',
  '1e3',
  '1E-2',
  '-',
  '1.0',
  '1.50',
  '0.1',
  '0.000001',
  '123456789012345',
  '1234567890123456',
  '12345678901234567890',
  '0.1234567890123456789',
  '9007199254740991',
  '9007199254740993',
  '4294967296',
  '2147483647',
  '2147483648',
  '1073741824',
  '999999999',
  '1000000000',
  '-1.5',
  '1767225600000.5',
  '32767',
  '32768',
  '-2147483648',
  '1-1',
  '1..2',
];
/** Other value texts: strings with escapes, control and long, literals, nesting, bad JSON. */
const VALUES = [
  '""',
  '"x"',
  '"a\\"b"',
  '"a\\\\b"',
  '"\\u0041"',
  '"tab\\t"',
  '"a\tb"',
  `"${'h'.repeat(13)}"`,
  `"${'h'.repeat(64)}"`,
  `"${'h'.repeat(65)}"`,
  '"gpu-0000"',
  'true',
  'false',
  'null',
  'tru',
  'nul',
  'falsey',
  '[]',
  '[1]',
  '{}',
  '{"a":1}',
  '"unterminated',
  'NaN',
  'Infinity',
  'undefined',
  "'x'",
];
/** Characters that matter to JSON, for random damage. */
const DAMAGE = ['"', ',', ':', '{', '}', '\\', ' ', '0', '9', '-', '.', 'e', 'x', '\t', '\r', '['];

/** The line with the value of its key-th key written as `text`. */
function withValue(line: string, key: string, text: string): string {
  const o = JSON.parse(line) as Record<string, unknown>;
  return `{${Object.keys(o)
    .map((k) => `${JSON.stringify(k)}:${k === key ? text : JSON.stringify(o[k])}`)
    .join(',')}}`;
}

/** Lines near a valid one: each value rewritten, keys dropped, doubled, swapped, added, damaged. */
function mutations(line: string, rng: Random): string[] {
  const o = JSON.parse(line) as Record<string, unknown>;
  const keys = Object.keys(o);
  const out: string[] = [];
  const texts = [...NUMBERS, ...VALUES];
  for (const key of keys)
    for (let i = 0; i < 6; i++) out.push(withValue(line, key, texts[rng.int(texts.length)]));
  const body = line.slice(1, -1);
  const key = keys[rng.int(keys.length)];
  const other = keys[rng.int(keys.length)];
  out.push(
    `{${body},"${key}":${JSON.stringify(o[key])}}`, // a key twice (JSON.parse keeps the last)
    `{${body},"__proto__":{"x":1}}`,
    `{${body},"__proto__":1}`,
    `{${body},"constructor":1}`,
    `{${body},"0":1}`,
    `{${body},"extra":"x"}`,
    `{"__proto__":1,${body}}`,
    JSON.stringify(Object.fromEntries(keys.filter((k) => k !== key).map((k) => [k, o[k]]))),
    JSON.stringify(
      Object.fromEntries(
        keys.map((k) => [
          k === key ? other : k === other ? key : k,
          o[k === key ? other : k === other ? key : k],
        ]),
      ),
    ),
    line.replace(':', ': '),
    line.replace(',', ' ,'),
    `${line} `,
    `${line}x`,
    `${line}}`,
    line.slice(0, -1),
    line.slice(0, rng.int(line.length)),
    `[${line}]`,
  );
  for (let i = 0; i < 12; i++) {
    const at = rng.int(line.length);
    const c = DAMAGE[rng.int(DAMAGE.length)];
    out.push(
      rng.chance(0.5) ? line.slice(0, at) + c + line.slice(at + 1) : line.slice(0, at) + c + line.slice(at),
    );
  }
  return out;
}

/** What JSON.parse and then the event check make of a line: the value and its problem, or the parse error. */
function reference(line: string): { value?: unknown; problem?: string; error?: string } {
  try {
    const value = JSON.parse(line);
    return { value, problem: eventProblem(value) };
  } catch (err) {
    return { error: `not valid JSON: ${(err as Error).message}` };
  }
}

const sameObject = (a: unknown, b: unknown): boolean =>
  isDeepStrictEqual(a, b) &&
  (typeof a !== 'object' || a === null || Object.keys(a).join() === Object.keys(b as object).join());

describe('scanLine', () => {
  it("reads exactly JSON.parse's object, or leaves the line to it, over real lines and their mutations", async () => {
    const real = await realLines();
    for (const l of real) learn(JSON.parse(l));
    const rng = new Random(11);
    let read = 0;
    let left = 0;
    let refused = 0;
    const wrong: string[] = []; // gathered, not one expect per line: fifty thousand of them are slow
    const lines = real.flatMap((l, i) => (i % 3 === 0 ? [l, ...mutations(l, rng)] : [l]));
    for (const line of lines) {
      if (!/^[\x20-\x7e]*$/.test(line)) continue; // bytes are handed over for ASCII text only
      const got = scanLine(line, Buffer.from(line, 'latin1'), 0);
      if (got === undefined) {
        left++;
        continue;
      }
      read++;
      const ref = reference(line);
      const problem = eventProblem(got);
      if (
        ref.error !== undefined ||
        !sameObject(got, ref.value) ||
        Object.getPrototypeOf(got) !== Object.prototype
      )
        wrong.push(`read otherwise than JSON.parse: ${line}`);
      else if (problem !== ref.problem) wrong.push(`another verdict (${problem} / ${ref.problem}): ${line}`);
      if (ref.problem !== undefined) refused++;
    }
    expect(wrong).toEqual([]);
    // Each way came up many times: read and valid, read and refused with the schema's reason, left.
    expect(read - refused).toBeGreaterThan(real.length);
    expect(refused).toBeGreaterThan(1000);
    expect(left).toBeGreaterThan(5000);
  });

  it('leaves a line whose bytes run on past it to JSON.parse', () => {
    const line = '{"v":1,"kind":"gpu","ts":1,"host":"h","gpu":0,"sm_clock_mhz":1980,"throttle_reasons":0}';
    learn(JSON.parse(line));
    const bytes = Buffer.from(`${line}\n${line}`, 'latin1');
    expect(sameObject(scanLine(line, bytes, 0), JSON.parse(line))).toBe(true);
    expect(sameObject(scanLine(line, bytes, line.length + 1), JSON.parse(line))).toBe(true);
    // Cut short: the bytes of the next line must not complete it.
    expect(scanLine(line.slice(0, -1), bytes, 0)).toBeUndefined();
    expect(scanLine(line.slice(0, 40), bytes, 0)).toBeUndefined();
  });
  it('reads a kind written in several shapes by turns, each from where the last one left the line', () => {
    // Four shapes that share their first keys in every way: one ends where another goes on, two
    // part at their third key, one at its second.
    const shapes = [
      ['a', 'b', 'c'],
      ['a', 'b'],
      ['a', 'b', 'd'],
      ['a', 'x'],
    ];
    const line = (keys: string[]) =>
      JSON.stringify({
        v: 1,
        kind: 'turns',
        ...Object.fromEntries(keys.map((k, i) => [k, i ? `s${i}` : i])),
      });
    for (const keys of shapes) learn(JSON.parse(line(keys)));
    // Never learnt: a shape's keys cut, extended, or parted from it where no other shape does.
    const others = [
      ['a'],
      ['a', 'b', 'c', 'd'],
      ['a', 'b', 'e'],
      ['a', 'x', 'c'],
      ['b'],
      ['a', 'b', 'd', 'c'],
    ];
    const rng = new Random(7);
    const wrong: string[] = [];
    for (let i = 0; i < 2000; i++) {
      const known = rng.next() < 0.8;
      const pick = known ? shapes : others;
      const text = line(pick[Math.floor(rng.next() * pick.length)]);
      const got = scanLine(text, Buffer.from(text, 'latin1'), 0);
      if (known ? !sameObject(got, JSON.parse(text)) : got !== undefined) wrong.push(text);
    }
    expect(wrong).toEqual([]);
  });
});

describe('FileTransport with the scanner', () => {
  /**
   * Reads the real lines and their mutations through the file transport (with a second, empty file
   * when `merged`: the read that merges files by event time) and checks it delivers what JSON.parse
   * gives: events, dead letters, their reasons and line numbers.
   */
  async function deliversWhatJsonParseGives(merged: boolean) {
    const real = await realLines();
    const rng = new Random(5);
    // Several 64 KB reads; CRLF ends, padding, a byte-order mark and a non-ASCII read among them.
    const lines = real.flatMap((l, i) => [l, ...(i % 4 === 0 ? mutations(l, rng) : [])]);
    const text = lines
      .map((l, i) => (i % 97 === 0 ? `${l}\r` : i % 89 === 0 ? `  ${l}` : i === 5 ? `\ufeff${l}` : l))
      .concat(['{"v":1,"kind":"fault","ts":1,"host":"h","source":"xid","message":"Grüße"}', ''])
      .join('\n');
    const file = join(dir, 'mixed.jsonl');
    writeFileSync(file, text);
    const empty = join(dir, 'empty.jsonl');
    writeFileSync(empty, '');
    expect(text.length).toBeGreaterThan(4 * 64 * 1024);

    const events: unknown[] = [];
    const at: number[] = [];
    const bad: { reason: string; line?: number }[] = [];
    const source = new FileTransport({ path: file, more: merged ? [empty] : [], linesPerDelivery: 500 });
    await source.consume(async (d) => {
      events.push(...d.events);
      at.push(...d.lineNumbers!);
      bad.push(...d.undecodable!.map((u) => ({ reason: u.reason, line: u.line })));
    });
    await source.drain();

    const want: unknown[] = [];
    const wantAt: number[] = [];
    const wantBad: { reason: string; line?: number }[] = [];
    text.split('\n').forEach((raw, i) => {
      // Both reads trim every line (a byte-order mark too).
      const line = raw.trim();
      if (line.length === 0) return;
      const ref = reference(line);
      if (ref.error !== undefined)
        wantBad.push({ reason: `${merged ? `${file}: ` : ''}${ref.error}`, line: i + 1 });
      else {
        want.push(ref.value);
        wantAt.push(i + 1);
      }
    });
    // The second file holds nothing: the merged read goes in this file's order.
    expect(at).toEqual(wantAt);
    expect(bad).toEqual(wantBad);
    expect(events.length).toBe(want.length);
    const wrong = want.flatMap((w, i) =>
      sameObject(events[i], w) && eventProblem(events[i]) === eventProblem(w) ? [] : [JSON.stringify(w)],
    );
    expect(wrong).toEqual([]);
  }

  it('delivers what JSON.parse gives for every line: events, the dead letters, their reasons and line numbers', async () => {
    await deliversWhatJsonParseGives(false);
  });

  it('delivers what JSON.parse gives when it merges several files by event time', async () => {
    await deliversWhatJsonParseGives(true);
  });
});

describe('decodeBatch with the scanner (Kafka messages, HTTP bodies)', () => {
  it('gives what JSON.parse gives for every line of an ASCII body, and of one that is not', async () => {
    const real = await realLines();
    const rng = new Random(9);
    const lines = real
      .flatMap((l, i) => [l, ...(i % 4 === 0 ? mutations(l, rng) : [])])
      .map((l, i) => (i % 97 === 0 ? `${l}\r` : i % 89 === 0 ? `  ${l}` : l));
    const ascii = lines.filter((l) => isAscii(Buffer.from(l))).join('\n');
    for (const text of [ascii, `\ufeff${ascii}\n{"v":1,"kind":"fault","ts":1,"message":"Grüße"}`]) {
      const got = decodeBatch(Buffer.from(text));
      const want: { value: unknown; at: number }[] = [];
      const wantBad: { raw: string; reason: string; line: number }[] = [];
      text.split('\n').forEach((raw, i) => {
        const line = raw.trim();
        if (!line) return;
        const ref = reference(line);
        if (ref.error !== undefined) wantBad.push({ raw: line, reason: ref.error, line: i + 1 });
        else want.push({ value: ref.value, at: i + 1 });
      });
      expect(got.undecodable).toEqual(wantBad);
      expect(got.at).toEqual(want.map((w) => w.at));
      const wrong = want.flatMap((w, i) =>
        sameObject(got.events[i], w.value) && eventProblem(got.events[i]) === eventProblem(w.value)
          ? []
          : [JSON.stringify(w.value)],
      );
      expect(wrong).toEqual([]);
    }
  });
});
