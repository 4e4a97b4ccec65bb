import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { validateEvent } from '../schema/validate.js';
import { FIELD_MIX, writeFieldMixFile } from './field-mix.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-field-mix-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("the field's mix", () => {
  const file = join(dir, 'field.jsonl');
  const gpus = 64;
  const steps = 6;
  const n = writeFieldMixFile(file, gpus, steps);
  const events = readFileSync(file, 'utf8')
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l));

  it('is valid v1 events only, one per line, as many as it says', () => {
    expect(events).toHaveLength(n);
    for (const e of events) expect(validateEvent(e)).toEqual({ ok: true, event: e });
  });

  it("holds each collector's events at its documented rate", () => {
    const count = (kind: string) => events.filter((e) => e.kind === kind).length;
    // dcgm-exporter at 1 Hz: 5 samples per GPU in a 5 s step.
    expect(count('gpu')).toBe(gpus * steps * (FIELD_MIX.stepMs / FIELD_MIX.gpuSampleMs));
    expect(count('step')).toBe(gpus * steps);
    // 8 reduced records per GPU and step; 6 on the first and last of the 4 stages (one neighbour).
    expect(count('collective')).toBe((gpus / 4) * steps * (8 + 8 + 6 + 6));
    expect(count('fault')).toBe(2);
    expect(count('job')).toBe(1);
  });

  it('carries the fields the collectors send beyond the contract', () => {
    const gpu = events.find((e) => e.kind === 'gpu');
    expect(gpu).toMatchObject({ pod: expect.stringMatching(/^llama-70b-worker-\d+$/), job: 'llama-70b' });
    const p2p = events.find((e) => e.kind === 'collective' && e.op === 'send');
    expect(p2p).toMatchObject({ count: 8, peer_host: expect.any(String), seq: expect.any(Number) });
    expect(events.find((e) => e.kind === 'step')).toMatchObject({
      pid: expect.any(Number),
      timing: 'cuda_events',
    });
  });
});
