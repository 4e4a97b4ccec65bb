import { isDeepStrictEqual } from 'node:util';
import { Value } from '@sinclair/typebox/value';
import { describe, expect, it } from 'vitest';
import { learn, scanLine } from '../stream/scan.js';
import { EVENT_SCHEMAS } from './events.js';
import { eventProblem, parseEventLine, validateEvent } from './validate.js';

const step = {
  v: 1,
  kind: 'step',
  ts: 1767225600000,
  job: 'j1',
  rank: 3,
  host: 'gpu-0000',
  gpu: 3,
  step: 10,
  step_ms: 1200,
  compute_ms: 1000,
  comm_wait_ms: 150,
};

describe('validateEvent', () => {
  it('accepts a valid event and keeps unknown fields', () => {
    const v = validateEvent({ ...step, collector_version: '1.2', extra: { a: 1 } });
    expect(v.ok).toBe(true);
    if (v.ok) expect((v.event as Record<string, unknown>).collector_version).toBe('1.2');
  });

  it.each([
    ['not JSON', '{"v":1,', /not valid JSON/],
    ['not an object', '[1,2]', /not a JSON object/],
    ['no kind', '{"v":1,"ts":1}', /missing field: kind/],
    ['unknown kind', '{"v":1,"kind":"weather","ts":1}', /unknown kind "weather"/],
    ['missing field', JSON.stringify({ ...step, compute_ms: undefined }), /step: missing field: compute_ms/],
    ['wrong type', JSON.stringify({ ...step, step_ms: 'fast' }), /step\.step_ms: .*number.*"fast"/],
    ['negative time', JSON.stringify({ ...step, compute_ms: -5 }), /step\.compute_ms/],
    ['wrong version', JSON.stringify({ ...step, v: 2 }), /step\.v/],
    [
      'bad op',
      JSON.stringify({
        v: 1,
        kind: 'collective',
        ts: 1,
        job: 'j',
        rank: 0,
        host: 'h',
        step: 1,
        op: 'shout',
        comm: 'c',
        bytes: 1,
        dur_ms: 1,
      }),
      /collective\.op/,
    ],
  ])('rejects %s with a reason naming the problem', (_name, line, reason) => {
    const v = parseEventLine(line);
    expect(v.ok).toBe(false);
    if (!v.ok) expect(v.reason).toMatch(reason);
  });

  // Values the store's columns cannot hold are refused here, with the field, instead of failing
  // the store insert (which would hold the whole batch) or being stored wrapped around.
  it.each([
    ['a timestamp in 2100 or later', { ts: 1e20 }, /step\.ts: Expected number to be less than 4102444800000/],
    ['a GPU index past Int16', { gpu: 70_000 }, /step\.gpu: .*less or equal to 32767/],
    ['a pipeline stage past Int16', { stage: 40_000 }, /step\.stage: .*less or equal to 32767/],
    ['a rank past Int32', { rank: 2 ** 31 }, /step\.rank: .*less or equal to 2147483647/],
    ['a step past exact doubles', { step: 2 ** 64 }, /step\.step: .*less or equal to 9007199254740991/],
  ])('refuses %s', (_what, patch, reason) => {
    const v = validateEvent({ ...step, ...patch });
    expect(v.ok).toBe(false);
    if (!v.ok) expect(v.reason).toMatch(reason);
  });

  it('accepts the largest values the store holds', () => {
    expect(
      validateEvent({ ...step, ts: Date.UTC(2100, 0, 1) - 1, gpu: 32767, stage: 32767, rank: 2 ** 31 - 1 })
        .ok,
    ).toBe(true);
  });

  it('accepts every kind of the v1 contract', () => {
    const ts = 1;
    const events = [
      {
        v: 1,
        kind: 'job',
        ts,
        job: 'j',
        world_size: 8,
        gpu_model: 'H100-SXM',
        dtype: 'bf16',
        parallel: { tp: 8, pp: 1, dp: 1 },
        flops_per_step: 1e15,
      },
      step,
      {
        v: 1,
        kind: 'collective',
        ts,
        job: 'j',
        rank: 0,
        host: 'h',
        step: 1,
        op: 'send',
        comm: 'pp',
        peer: 8,
        bytes: 1e6,
        dur_ms: 2,
      },
      { v: 1, kind: 'gpu', ts, host: 'h', gpu: 0, sm_clock_mhz: 1980, throttle_reasons: 0 },
      { v: 1, kind: 'checkpoint', ts, job: 'j', step: 100, phase: 'save', dur_ms: 9000, ok: true },
      {
        v: 1,
        kind: 'fault',
        ts,
        host: 'h',
        gpu: 1,
        source: 'xid',
        code: 79,
        message: 'GPU has fallen off the bus.',
      },
      { v: 1, kind: 'job_event', ts, job: 'j', event: 'restart', cause: 'xid 79' },
    ];
    for (const e of events) expect(validateEvent(e)).toMatchObject({ ok: true });
  });
});

// eventProblem checks the three commonest kinds at call sites of their own (the pipeline's hot
// path): its verdict must be the schema's, over valid events and over every field made wrong.
describe('eventProblem on the hot kinds', () => {
  // The step's job, rank, place and step, without its timings.
  const { step_ms: _ms, compute_ms: _compute, comm_wait_ms: _wait, ...where } = step;
  const full = {
    step: { ...step, stage: 1, tokens: 4096, pid: 4242 },
    collective: {
      ...where,
      kind: 'collective',
      op: 'send',
      comm: '0x7a11',
      nranks: 8,
      peer: 11,
      peer_host: 'gpu-0001',
      bytes: 1e6,
      dur_ms: 2.5,
      count: 4,
      max_ms: 0.9,
      busbw_gbs: 40.5,
      seq: 12,
      comm_name: 'pp',
      peer_comm_rank: 1,
      comm_rank: 0,
      window: 'step',
      interval_ms: 5000,
    },
    gpu: {
      v: 1,
      kind: 'gpu',
      ts: 1767225600000,
      host: 'gpu-0000',
      gpu: 3,
      uuid: 'GPU-1',
      job: 'j1',
      rank: 3,
      sm_clock_mhz: 1980,
      max_sm_clock_mhz: 1980,
      power_w: 650,
      temp_c: -5,
      util_pct: 99,
      throttle_reasons: 4,
      ecc_sbe: 0,
      ecc_dbe: 0,
    },
  } as const;
  // Wrong in every way a field can be: type, sign, fraction, bounds, empty, null, enum, extra kinds.
  const BAD: unknown[] = [
    undefined,
    null,
    '',
    'x',
    '3',
    -1,
    0.5,
    -0.5,
    2 ** 31,
    2 ** 15,
    2 ** 53,
    1e300,
    Number.NaN,
    true,
    [],
    {},
    0,
    1,
    'step',
    'bogus',
  ];
  const cases = Object.entries(full).flatMap(([kind, e]) => [
    { kind, e: { ...e } as Record<string, unknown> },
    { kind, e: { v: 1, kind, ts: 1 } as Record<string, unknown> },
    ...Object.keys(e).flatMap((field) => [
      { kind, e: Object.fromEntries(Object.entries(e).filter(([k]) => k !== field)) },
      ...BAD.map((bad) => ({ kind, e: { ...e, [field]: bad } as Record<string, unknown> })),
    ]),
  ]);

  it('agrees with the schema and gives its reason', () => {
    let valid = 0;
    for (const { kind, e } of cases) {
      const ok = Value.Check(EVENT_SCHEMAS[kind as keyof typeof EVENT_SCHEMAS], e);
      const problem = eventProblem(e);
      expect(problem === undefined, JSON.stringify(e)).toBe(ok);
      if (ok) valid++;
      // The reason names the field (a `kind` made wrong is another kind, or none).
      else if (e.kind === kind) expect(problem).toMatch(new RegExp(`^${kind}[.:]`));
    }
    // Both verdicts came up many times.
    expect(valid).toBeGreaterThan(50);
    expect(cases.length - valid).toBeGreaterThan(500);
  });

  // Replay reads the lines of shapes it has seen from their bytes (stream/scan.ts) instead of
  // JSON.parse: whatever it reads must be JSON.parse's object, so the verdict and reason are too.
  it('reads the same cases from their lines as JSON.parse does, verdict and reason', () => {
    for (const e of Object.values(full)) learn(JSON.parse(JSON.stringify(e)));
    let scanned = 0;
    let refused = 0;
    for (const { e } of cases) {
      const line = JSON.stringify(e);
      if (line === undefined) continue;
      const read = scanLine(line, Buffer.from(line, 'latin1'), 0);
      if (read === undefined) continue;
      const parsed = JSON.parse(line);
      expect(
        isDeepStrictEqual(read, parsed) && Object.keys(read).join() === Object.keys(parsed).join(),
        line,
      ).toBe(true);
      const problem = eventProblem(read);
      expect(problem, line).toBe(eventProblem(parsed));
      scanned++;
      if (problem !== undefined) refused++;
    }
    // Most lines have a shape it knows; many of them are refused by the schema, with its reason.
    expect(scanned).toBeGreaterThan(cases.length / 2);
    expect(refused).toBeGreaterThan(300);
  });
});
