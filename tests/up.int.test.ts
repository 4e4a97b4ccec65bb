/**
 * `rankwatch up` as a user runs it (the built CLI, a subprocess on 127.0.0.1, a free port):
 * a simulated job with a throttled GPU is posted to /v1/ingest in gzip batches, the finding is
 * printed as it opens, bad lines are answered with their reasons and kept as dead letters, and
 * SIGTERM stops it cleanly.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChdbStore } from '../store/chdb.js';
import { expectBuiltPipeline, postLines, type Running, simLines, startRankwatch, until } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-up-'));

describe('rankwatch up', () => {
  let up: Running;
  let url = '';
  const auth = { authorization: 'Bearer t0k' };

  beforeAll(async () => {
    up = startRankwatch(['up', '--port', '0', '--data', join(dir, 'data'), '--token', 't0k']);
    url = await until('the listening line', () => /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1]);
  });

  it('builds its pipeline through the builder: the in-process bus, the detectors, chDB, the console', () => {
    expectBuiltPipeline(up.stderr(), 'wal(memory)', /^chDB at .* · findings: actions, console$/);
  });

  afterAll(() => {
    up.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  it('ingests a simulated job and prints the throttle finding as it opens', async () => {
    const lines = simLines(
      '--ranks',
      '16',
      '--steps',
      '150',
      '--seed',
      '3',
      '--job',
      'upjob',
      '--fault',
      'throttle:rank=5,at=40',
    );
    expect(new Set(await postLines(url, lines, auth, 5000))).toEqual(new Set([200]));
    await until('the throttle finding', () =>
      /FOUND\s+throttle upjob \S+\/\d+ rank 5/.test(up.stdout()) ? true : undefined,
    );
    const health = (await (await fetch(`${url}/healthz`)).json()) as { pipeline: { events: number } };
    expect(health.pipeline.events).toBeGreaterThan(0);
  }, 180_000);

  it('answers bad lines with their line numbers and reasons, and refuses a missing token', async () => {
    const res = await fetch(`${url}/v1/ingest`, {
      method: 'POST',
      headers: auth,
      body: '{"v":1,"kind":"fault","ts":1,"host":"h","source":"xid","message":"m"}\nnot json\n',
    });
    // Mostly accepted: a 200 that counts the rejected line (a 400 is for a batch with nothing good).
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      accepted: 1,
      rejected: 1,
      errors: [{ line: 2 }],
      message: '1 event(s) accepted, 1 line(s) rejected and kept as dead letters',
    });
    const anon = await fetch(`${url}/v1/ingest`, { method: 'POST', body: '{}' });
    expect(anon.status).toBe(401);
  });

  it('stops cleanly on SIGTERM; the rejected line is kept in the store with its line number and reason', async () => {
    expect(await up.stop()).toBe(0);
    expect(up.stdout()).toMatch(/stopped after \d+ events, 1 dead letters/);
    const store = new ChdbStore({ path: join(dir, 'data') });
    try {
      expect(await store.query('SELECT source, reason, raw FROM dead_letters FINAL')).toEqual([
        {
          source: 'ingest',
          reason: expect.stringMatching(/^ingest line 2 \(token cli-token\): not valid JSON/),
          raw: 'not json',
        },
      ]);
    } finally {
      await store.close();
    }
  });
});
