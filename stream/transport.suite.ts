/**
 * The conformance suite every transport passes: the in-process bus here, Kafka in its own test.
 * `make` returns a fresh transport (its own topic/queue) for each test.
 */
import { describe, expect, it } from 'vitest';
import { RankwatchError } from '../core/errors.js';
import type { Delivery, Transport } from './transport.js';

const ev = (job: string, i: number) => ({ v: 1, kind: 'step', ts: i, job, i });

async function waitFor(check: () => boolean, ms = 20_000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 10));
  }
}

export function transportSuite(name: string, make: () => Promise<Transport>): void {
  describe(`transport conformance: ${name}`, () => {
    it('delivers every event once, in order within a key', async () => {
      const t = await make();
      const got: Delivery[] = [];
      await t.consume(async (d) => {
        got.push(d);
      });
      for (let i = 0; i < 20; i++) {
        await t.publish([
          { key: 'job-a', events: [ev('job-a', 2 * i), ev('job-a', 2 * i + 1)] },
          { key: 'job-b', events: [ev('job-b', i)] },
        ]);
      }
      await waitFor(() => got.reduce((n, d) => n + d.events.length, 0) >= 60);
      const seq = (job: string) =>
        got.filter((d) => d.key === job).flatMap((d) => d.events.map((e) => (e as { i: number }).i));
      expect(seq('job-a')).toEqual(Array.from({ length: 40 }, (_, i) => i));
      expect(seq('job-b')).toEqual(Array.from({ length: 20 }, (_, i) => i));
      await t.stop();
    });

    it('redelivers a batch whose handler failed (at least once), then moves on', async () => {
      const t = await make();
      let calls = 0;
      const done: number[] = [];
      await t.consume(async (d) => {
        calls++;
        if (calls <= 2) throw new Error('store down');
        done.push(...d.events.map((e) => (e as { i: number }).i));
      });
      await t.publish([{ key: 'job-a', events: [ev('job-a', 1)] }]);
      await t.publish([{ key: 'job-a', events: [ev('job-a', 2)] }]);
      await waitFor(() => done.includes(2));
      expect(done[0]).toBe(1);
      expect(calls).toBeGreaterThanOrEqual(4);
      expect(t.counters().redelivered_batches).toBeGreaterThanOrEqual(2);
      await t.stop();
    });

    it('stop is idempotent, and publishing after stop rejects with RANKWATCH_ERR_STOPPED', async () => {
      const t = await make();
      const got: Delivery[] = [];
      await t.consume(async (d) => {
        got.push(d);
      });
      await t.stop();
      await expect(t.stop()).resolves.toBeUndefined();
      const err = await t.publish([{ key: 'job-a', events: [ev('job-a', 1)] }]).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(RankwatchError);
      expect(err).toMatchObject({ code: 'RANKWATCH_ERR_STOPPED', retriable: false });
      expect(t.counters().published_events).toBe(0);
      expect(got).toEqual([]);
    });
  });
}
